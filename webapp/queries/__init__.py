"""Read queries behind the dashboard pages.

Every function here runs a fixed number of SQL statements whatever the amount of data: counts
and sums come from GROUP BY aggregates or subqueries, lists are paged by keyset (never OFFSET),
and rows are returned as small frozen records so the pure view-model code never touches the
session. The tests in ``tests/test_html_queries.py`` hold these numbers constant.
"""
