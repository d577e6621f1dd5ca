"""The conversation's token and cost charts: the panel of the conversation page (htmx), its JSON
twin and one chart's table as CSV. The replay options are the replay preview's, read by the same
parser (``persistence``, ``freshness`` and ``context_budget`` change the charts)."""

from __future__ import annotations

from flask import request

from ...analytics.conversation_charts import CONVERSATION_CHARTS
from ...errors import error_response
from ...replay.export import OptionError, query_params
from .. import charts
from ..common import attachment, not_found, twin_get, wants_fragment, wants_json
from ..context import current_project
from . import bp


@twin_get(bp, "/conversations/<int:conversation_id>/charts")
def conversation_charts_get(conversation_id: int, fmt: str):
    try:
        options = charts.conversation_options(request.args)
    except OptionError as exc:
        return charts.bad_argument(exc, fmt)
    project = current_project()
    _raw, overrides = charts.project_overrides(project.id)
    result = charts.conversation_charts_for(project.id, overrides, conversation_id, options)
    if result is None:
        return not_found("conversation")
    if wants_json(fmt):
        return {
            "conversation": {
                "id": result.conversation.id,
                "external_id": result.conversation.external_id,
            },
            "options": query_params(options),
            "freshness_seconds": result.freshness_seconds,
            "charts": {name: chart.to_dict() for name, chart in result.charts.items()},
        }
    template = (
        "charts/_conversation_charts.html"
        if wants_fragment()
        else "charts/conversation_charts.html"
    )
    return charts.html(
        template, result=result, options=options, replay_params=query_params, charts=result.charts
    )


@bp.get("/conversations/<int:conversation_id>/charts/<chart>.csv")
def conversation_chart_csv_get(conversation_id: int, chart: str):
    if chart not in CONVERSATION_CHARTS:
        names = ", ".join(CONVERSATION_CHARTS)
        return error_response(404, f"no chart named {chart!r}; one of {names}")
    try:
        options = charts.conversation_options(request.args)
    except OptionError as exc:
        return charts.bad_argument(exc, "csv")
    project = current_project()
    _raw, overrides = charts.project_overrides(project.id)
    result = charts.conversation_charts_for(
        project.id, overrides, conversation_id, options, [chart]
    )
    if result is None:
        return error_response(404, "no such conversation in this project")
    return attachment(
        result.charts[chart].table.to_csv(),
        f"toolscope-conversation-{conversation_id}-{chart}.csv",
        "text/csv",
    )
