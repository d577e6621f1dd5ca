"""Token and cost analytics: what each service call had in its context, which tools' results
drive input cost (re-send attribution), and the Plotly charts of the Costs, conversation and
tools pages.

Pure modules (no Flask, no database): ``context`` (context size per service call, by part),
``tool_costs`` (attribution per tool), ``windows`` (model context windows), ``filters``,
``tables``, ``figures`` and the chart builders ``project_charts`` / ``conversation_charts``.
Database reads are in ``queries`` (a fixed number of statements each); ``pages`` puts the two
together for the views in ``webapp.analytics_views``.
"""
