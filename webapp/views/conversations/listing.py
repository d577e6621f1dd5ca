"""The conversations list: active search, filters, sort, infinite scroll, live new rows."""

from __future__ import annotations

from datetime import UTC, datetime

from flask import redirect, render_template, request, url_for

from ...queries import conversation_list as queries
from ...queries.projects import channel_names
from ..common import BadParameter, bad_parameter_response, page_limit, twin_get
from ..context import current_project, current_project_id
from ..paged_list import list_context, page_start, respond_list, wants_page, wants_total
from . import bp
from .list_filters import parse_filters

# The list polls less often than a conversation page: it only announces new activity.
LIST_POLL_SECONDS = 5


@bp.get("/")
def index_get():
    return redirect(url_for("conversations.conversations_get"))


def _since_arg() -> datetime:
    raw = request.args.get("since", "")
    try:
        since = datetime.fromisoformat(raw)
    except ValueError:
        raise BadParameter("since", "must be an ISO 8601 timestamp") from None
    return since if since.tzinfo else since.replace(tzinfo=UTC)


@twin_get(bp, "/conversations")
def conversations_get(fmt: str):
    """Full page, the results fragment (search and filters), or the next rows (a cursor)."""
    project = current_project()
    try:
        filters = parse_filters(request.args)
        after = page_start(queries.page_start, filters.sort)
        limit = page_limit(queries.DEFAULT_LIMIT, queries.MAX_LIMIT)
    except BadParameter as exc:
        return bad_parameter_response(exc, fmt)
    live = filters.sort == "recent" and after is None
    # Read before the page so that nothing written meanwhile is missed by the live poll.
    newest = queries.newest_activity(project.id) if live else None
    page = queries.list_conversations(project.id, filters, after=after, limit=limit)
    # The total above the list: for a new page or search, not for the next rows nor the twin.
    total = queries.count_conversations(project.id, filters) if wants_total(fmt, after) else None
    data = {
        **list_context(page, filters, limit),
        "total": total,
        "total_cap": queries.TOTAL_CAP,
        "live_since": newest.isoformat() if newest else None,
        "poll_seconds": LIST_POLL_SECONDS,
        "project": project,
    }
    if wants_page(fmt):
        data["channels"] = channel_names(project.id)
    return respond_list(
        data,
        fmt,
        after,
        page="conversations/list.html",
        results="conversations/_results.html",
        rows="conversations/_rows.html",
        endpoint="conversations.conversations_get",
    )


@bp.get("/conversations/live")
def conversations_live_get():
    """The list's poll: 204 (one query) unless a conversation was active after ``since``;
    then the new rows, put on top of the list, and a poller with the new ``since``."""
    project_id = current_project_id()
    try:
        since = _since_arg()
        filters = parse_filters(request.args)
    except BadParameter as exc:
        return bad_parameter_response(exc)
    newest = queries.newest_activity(project_id)
    if newest is None or newest <= since:
        return "", 204
    page = queries.updated_since(project_id, filters, since)
    return render_template(
        "conversations/_list_live.html",
        data=page.rows,
        live_since=newest.isoformat(),
        filter_args=filters.query_args(),
        poll_seconds=LIST_POLL_SECONDS,
    )
