"""Token and cost analytics: what each service call had in its context, which tools' results
drive input cost (re-send attribution), and the Plotly charts of the Costs, conversation and
tools pages.

Pure modules (no Flask, no database): ``context`` (context size per service call, by part),
``attribution`` and ``tool_costs`` (re-send attribution per tool), ``windows`` (model context
windows), ``filters``, ``tables``, ``figures``, the chart builders ``project_charts`` /
``conversation_charts``, and ``records``, the data they are drawn from. ``webapp.queries``
reads those records from the database; ``webapp.views.charts`` puts the two together for the
pages.
"""
