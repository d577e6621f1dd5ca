"""The calls explorer: every tool call of the project, filtered (tool, status, duration, result
size, time, channel), searched in arguments and results, sorted and paged by keyset; each row
links to its place in its conversation. The page, its htmx fragments and its JSON twin come from
one query (``webapp.queries.call_explorer``, which ``GET /api/v1/calls`` uses too)."""

from __future__ import annotations

from flask import current_app, request, url_for

from ..db import utcnow
from ..queries import call_explorer as queries
from ..queries.cursors import CursorError
from ..queries.projects import channel_names, tool_names
from .common import (
    BadParameter,
    bad_parameter_response,
    page_limit,
    push_url,
    respond,
    twin_get,
    wants_fragment,
)
from .context import current_project
from .security import dashboard_blueprint

bp = dashboard_blueprint("calls", __name__)

# How the timeline labels and explains each status (webapp.views.conversations.badges).
STATUS_LABELS = {
    "error": ("error", "The tool reported an error."),
    "no-response": ("no response", "No response stored: replay leaves this out."),
    "not-captured": (
        "content not captured",
        "The agent's OpenTelemetry instrumentation did not record arguments and results.",
    ),
    "stale": ("stale now", "Older than the freshness window: replay now omits it."),
    "redacted": ("redacted", "Changed by redaction rules before it was stored."),
    "truncated": ("would be truncated", "More tokens than the replay's per-result cap."),
}
SORT_LABELS = (("time", "Time"), ("duration", "Duration"), ("size", "Result size"))


def _filters():
    try:
        filters = queries.parse_filters(request.args)
    except queries.FilterError as exc:
        raise BadParameter(exc.field, exc.message) from None
    try:
        after = queries.page_start(request.args.get("cursor"), filters.sort)
    except CursorError as exc:
        raise BadParameter("cursor", str(exc)) from None
    return filters, after


@twin_get(bp, "/calls")
def calls_get(fmt: str):
    """Full page, the results fragment (search and filters), or the next rows (a cursor)."""
    project = current_project()
    try:
        filters, after = _filters()
        limit = page_limit(queries.DEFAULT_LIMIT, queries.MAX_LIMIT)
    except BadParameter as exc:
        return bad_parameter_response(exc, fmt)
    page = queries.list_calls(
        project.id,
        filters,
        now=utcnow(),
        token_cap=current_app.config["REPLAY_RESULT_TOKEN_CAP"],
        after=after,
        limit=limit,
    )
    filter_args = filters.query_args()
    data = {
        "object": "list",
        "data": page.rows,
        "has_more": page.has_more,
        "next_cursor": page.next_cursor,
        "filters": filters,
        "filter_args": filter_args,
        "page_args": {**filter_args, **({"limit": limit} if "limit" in request.args else {})},
        "status_labels": STATUS_LABELS,
        "sort_labels": SORT_LABELS,
        "project": project,
    }
    if not wants_fragment() and fmt != "json":
        data["channels"] = channel_names(project.id)
        data["tools"] = tool_names(project.id)
    fragment = "calls/_rows.html" if after else "calls/_results.html"
    response = respond(
        data,
        page="calls/calls.html",
        fragment=fragment,
        fmt=fmt,
        json_keys=("object", "data", "has_more", "next_cursor", "filters"),
    )
    if wants_fragment() and after is None:
        return push_url(response, url_for(".calls_get", **filter_args))
    return response
