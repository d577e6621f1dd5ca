"""The calls explorer: every tool call of the project, filtered (tool, status, duration, result
size, time, channel), searched in arguments and results, sorted and paged by keyset; each row
links to its place in its conversation. The page, its htmx fragments and its JSON twin come from
one query (``webapp.queries.call_explorer``, which ``GET /api/v1/calls`` uses too)."""

from __future__ import annotations

from flask import current_app, request

from ..db import utcnow
from ..queries import call_explorer as queries
from ..queries.projects import channel_names, tool_names
from ..services.call_list import call_item
from .common import BadParameter, bad_parameter_response, page_limit, twin_get, wants_json
from .context import current_project
from .paged_list import list_context, page_start, respond_list, wants_page, wants_total
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
    return filters, page_start(queries.page_start, filters.sort)


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
    total = None
    if wants_total(fmt, after):  # the total above the list, for a new page or search
        # A first page that holds every match is its own total: no count (for a rare status,
        # one more walk of the project's calls; issue 24).
        total = (
            len(page.rows)
            if not page.has_more
            else queries.count_calls(
                project.id,
                filters,
                now=utcnow(),
                token_cap=current_app.config["REPLAY_RESULT_TOKEN_CAP"],
            )
        )
    data = {
        **list_context(page, filters, limit),
        "total": total,
        "total_cap": queries.TOTAL_CAP,
        "status_labels": STATUS_LABELS,
        "sort_labels": SORT_LABELS,
        "project": project,
    }
    if wants_page(fmt):
        data["channels"] = channel_names(project.id)
        data["tools"] = tool_names(project.id)
    if wants_json(fmt):  # the API's items (GET /api/v1/calls), not the template's rows
        data["data"] = [call_item(row) for row in page.rows]
    return respond_list(
        data,
        fmt,
        after,
        page="calls/calls.html",
        results="calls/_results.html",
        rows="calls/_rows.html",
        endpoint="calls.calls_get",
    )
