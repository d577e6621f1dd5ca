"""Every read: the dashboard's pages and JSON twins, the API's answers, the histories the replay
and the charts work on. A page's JSON twin and the API's read of the same thing come from the
same function here (the conversation list, a conversation, its replay history).

Every function here runs a fixed number of SQL statements whatever the amount of data: counts
and sums come from GROUP BY aggregates or subqueries, lists are paged by keyset (never OFFSET),
and rows are returned as small frozen records so the pure view-model code never touches the
session. The tests in ``tests/test_html_queries.py`` hold these numbers constant.
"""
