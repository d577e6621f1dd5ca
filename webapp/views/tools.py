"""Per-tool statistics, the drill-down to the conversations that used a tool, and the tool charts
panel of both pages (``/tools/charts``, put together by ``webapp.views.charts``)."""

from __future__ import annotations

from datetime import datetime

from flask import request, url_for

from ..analytics.filters import PRESETS, FilterError
from ..queries import call_explorer
from ..queries import tool_stats as queries
from ..queries.cursors import encode
from . import charts
from .common import (
    BadParameter,
    bad_parameter_response,
    cursor_arg,
    not_found,
    push_url,
    respond,
    twin_get,
    wants_fragment,
)
from .context import current_project
from .security import dashboard_blueprint

bp = dashboard_blueprint("tools", __name__)

# Sort keys of the tools table; larger first except for the name.
SORT_KEYS = {
    "calls": lambda s: s.calls,
    "errors": lambda s: s.error_rate,
    "p50": lambda s: s.p50_ms or 0.0,
    "p95": lambda s: s.p95_ms or 0.0,
    "size": lambda s: s.avg_response_bytes or 0.0,
    "tokens": lambda s: s.avg_response_tokens or 0.0,
    "last_seen": lambda s: s.last_seen.timestamp() if s.last_seen else 0.0,
}
CONVERSATIONS_PER_PAGE = 50
CHART_PANEL = ("tool-cost", "result-sizes", "errors")
MAX_NAME_CHARS = 255


def _range(period: call_explorer.CallFilters) -> dict[str, object]:
    """The period the figures cover, for the JSON twins: a preset's name and where it starts
    (the start of a UTC hour, analytics.filters.range_start), or the custom bounds."""
    return {"preset": period.range, "from": period.time_from, "to": period.time_to}


@twin_get(bp, "/tools")
def tools_get(fmt: str):
    sort = request.args.get("sort", "calls")
    if sort not in (*SORT_KEYS, "name"):
        return bad_parameter_response(
            BadParameter("sort", f"must be one of name, {', '.join(SORT_KEYS)}"), fmt
        )
    try:  # the time range picker's arguments, read as the calls explorer reads them
        period = call_explorer.parse_filters(
            {name: request.args.get(name, "") for name in ("range", "from", "to")}
        )
    except call_explorer.FilterError as exc:
        return bad_parameter_response(BadParameter(exc.field, exc.message), fmt)
    stats = queries.tool_stats(
        current_project().id, since=period.time_from, until=period.time_to
    )
    if sort == "name":
        stats.sort(key=lambda s: s.function_name)
    else:
        stats.sort(key=SORT_KEYS[sort], reverse=True)
    data = {
        "object": "list",
        "data": stats,
        "sort": sort,
        "period": period,
        "range": _range(period),
        "filter_args": period.query_args(),
    }
    response = respond(
        data, page="tools/tools.html", fmt=fmt, json_keys=("object", "data", "range")
    )
    if wants_fragment():  # the picker's request: the address bar shows the range's URL
        sorting = {"sort": sort} if sort != "calls" else {}
        return push_url(response, url_for("tools.tools_get", **sorting, **data["filter_args"]))
    return response


@twin_get(bp, "/tools/usage")
def tool_usage_get(fmt: str):
    """One tool: its statistics and the conversations that called it (keyset paged)."""
    name = request.args.get("name", "")
    try:
        if not name or len(name) > MAX_NAME_CHARS:
            raise BadParameter("name", f"a function name of 1 to {MAX_NAME_CHARS} characters")
        after = cursor_arg()
        if after is not None and not isinstance(after[0], datetime):
            raise BadParameter("cursor", "is not a tool usage cursor")
        # The time range picker's arguments, as the tools page reads them.
        period = call_explorer.parse_filters(
            {key: request.args.get(key, "") for key in ("range", "from", "to")}
        )
    except BadParameter as exc:
        return bad_parameter_response(exc, fmt)
    except call_explorer.FilterError as exc:
        return bad_parameter_response(BadParameter(exc.field, exc.message), fmt)
    project = current_project()
    since, until = period.time_from, period.time_to
    stats = queries.tool_stats(project.id, name, since=since, until=until) if after is None else []
    if after is None and not stats and not queries.tool_stats(project.id, name):
        return not_found("tool")  # unknown; a known tool without calls in the period is not
    rows, following = queries.conversations_using(
        project.id, name, after, CONVERSATIONS_PER_PAGE, since=since, until=until
    )
    data = {
        "name": name,
        "stats": stats[0] if stats else None,
        "conversations": rows,
        "has_more": following is not None,
        "next_cursor": encode(*following) if following is not None else None,
        "period": period,
        "range": _range(period),
        "filter_args": period.query_args(),
    }
    response = respond(
        data,
        page="tools/tool.html",
        fragment="tools/_conversation_rows.html" if after else None,
        fmt=fmt,
        json_keys=("name", "stats", "conversations", "has_more", "next_cursor", "range"),
    )
    if wants_fragment() and after is None:  # the picker's request: the address bar follows
        return push_url(response, url_for("tools.tool_usage_get", name=name, **data["filter_args"]))
    return response


@bp.get("/tools/charts")
def tool_charts_get():
    """The tools pages' chart panel (all tools, or one with ``tool=``)."""
    try:
        f = charts.filters_arg()
    except FilterError as exc:
        return charts.bad_argument(exc)
    project = current_project()
    _raw, overrides = charts.project_overrides(project.id)
    shown = charts.project_charts_for(project.id, overrides, f, CHART_PANEL)
    template = "charts/_tool_charts.html" if wants_fragment() else "charts/tool_charts.html"
    return charts.html(template, filters=f, charts=shown, presets=PRESETS)
