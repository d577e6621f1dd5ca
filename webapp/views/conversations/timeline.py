"""The conversation page: header and the first page of the timeline in the first response,
further pages, long runs and long texts loaded lazily, and the live view's poll."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from flask import current_app, redirect, render_template, request, url_for

from ...db import utcnow
from ...queries import otel as otel_queries
from ...queries import stats as stats_queries
from ...queries import timeline as queries
from ...queries.conversations import find_conversation, tool_definition_names
from ...queries.cursors import encode
from ...queries.records import ConversationRecord, MessageRecord
from ..common import (
    BadParameter,
    bad_parameter_response,
    cursor_arg,
    int_arg,
    not_found,
    or_404,
    respond,
    twin_get,
    wants_fragment,
    wants_json,
)
from ..context import current_project, current_project_id
from ..highlight import render_text
from ..runs import RUNS_ON_CONVERSATION, conversation_runs
from . import bp
from . import timeline_model as model
from .address import conversation_address
from .otel_hint import ContentHint, content_hint

# A conversation idle for longer than this is polled less often.
ACTIVE_WINDOW = timedelta(minutes=10)
IDLE_POLL_SECONDS = 15

MessageKey = tuple[datetime, int]


@dataclass(frozen=True, slots=True)
class TimelinePage:
    messages: list[model.MessageView]
    next_cursor: str | None
    # Key of the last message shown (or of the cursor when the page is empty).
    last_key: MessageKey | None


@dataclass(frozen=True, slots=True)
class LiveCursor:
    """What the live poll compares against: read *before* the page it belongs to."""

    updated_at: datetime
    newest_call_id: int


def badge_context(conversation: ConversationRecord) -> model.BadgeContext:
    return model.BadgeContext(
        now=utcnow(),
        freshness_seconds=conversation.freshness_seconds,
        token_cap=current_app.config["REPLAY_RESULT_TOKEN_CAP"],
    )


def message_views(
    conversation: ConversationRecord, messages: list[MessageRecord], turns_before: int
) -> list[model.MessageView]:
    """Views of ``messages`` with their first calls and usage: two queries."""
    ids = [m.id for m in messages]
    first = queries.first_calls(ids, model.CALLS_PER_CHUNK)
    return model.message_views(
        messages,
        calls=first.calls,
        summaries=first.summaries,
        usage=queries.service_calls(ids),
        ctx=badge_context(conversation),
        turns_before=turns_before,
    )


def load_page(
    conversation: ConversationRecord,
    after: MessageKey | None,
    *,
    start: queries.WindowStart | None = None,
    errors_only: bool = False,
) -> TimelinePage:
    """One page of the timeline: five queries whatever the size of the conversation. From
    ``start`` (a turn or an anchor's window) the turns before it are known; ``errors_only``
    shows the runs with errors and only their failed calls."""
    messages, more = queries.message_page(
        conversation.id,
        after,
        model.MESSAGES_PER_PAGE,
        start=start.key if start else None,
        errors_only=errors_only,
    )
    first = queries.first_calls(
        [m.id for m in messages], model.CALLS_PER_CHUNK, errors_only=errors_only
    )
    shown = model.messages_within_budget(messages, first.calls, model.PAGE_CALL_BUDGET)
    if shown < len(messages):
        messages, more = messages[:shown], True
    ids = [m.id for m in messages]
    if errors_only:
        turn_numbers = queries.turn_numbers(conversation.id, ids)
        before = 0
    else:
        turn_numbers = None
        before = start.turns_before if start else queries.turns_before(conversation.id, after)
    views = model.message_views(
        messages,
        calls={i: first.calls[i] for i in ids if i in first.calls},
        summaries=first.summaries,
        usage=queries.service_calls(ids),
        ctx=badge_context(conversation),
        turns_before=before,
        turn_numbers=turn_numbers,
        errors_only=errors_only,
    )
    last_key = (messages[-1].created_at, messages[-1].id) if messages else after
    next_cursor = encode(*last_key) if more and last_key else None
    return TimelinePage(views, next_cursor, last_key)


def _message_cursor(name: str = "cursor") -> MessageKey | None:
    after = cursor_arg(name)
    if after is not None and not isinstance(after[0], datetime):
        raise BadParameter(name, "is not a timeline cursor")
    return after  # type: ignore[return-value]


def poll_seconds(conversation: ConversationRecord) -> int:
    active = utcnow() - conversation.updated_at < ACTIVE_WINDOW
    return current_app.config["LIVE_POLL_SECONDS"] if active else IDLE_POLL_SECONDS


def live_url(conversation: ConversationRecord, page: TimelinePage, live: LiveCursor) -> str:
    return url_for(
        "conversations.conversation_live_get",
        conversation_id=conversation.id,
        after=encode(*page.last_key) if page.last_key else "",
        calls=live.newest_call_id,
        v=live.updated_at.isoformat(),
    )


def page_url(
    conversation: ConversationRecord, cursor: str | None, fmt: str = "html", view: str = ""
) -> str:
    endpoint = "conversations.conversation_get"
    return url_for(
        endpoint, conversation_id=conversation.id, cursor=cursor, fmt=fmt, view=view or None
    )


VIEWS = ("", "errors", "collapsed")


def _view_arg() -> str:
    view = request.args.get("view", "")
    if view not in VIEWS:
        raise BadParameter("view", "must be 'errors' or 'collapsed'")
    return view


def _window(conversation: ConversationRecord, anchor: model.Anchor | None):
    """The window an anchor opens (a turn, a message, a round's message, a call's message):
    one or two queries; None when the anchor is not in this conversation."""
    if anchor is None:
        return None
    if anchor.kind == "turn":
        return queries.turn_start(conversation.id, anchor.turn)
    if anchor.kind == "call":
        return queries.anchor_start(conversation.id, call_id=anchor.call_id)
    return queries.anchor_start(conversation.id, message_id=anchor.message_id)


@twin_get(bp, "/conversations/<int:conversation_id>")
def conversation_get(conversation_id: int, fmt: str):
    """The conversation page; with ``cursor``, the timeline page after it (the lazy loader's
    fragment, or a full page for browsers without htmx). ``at`` (an anchor: ``turn-12``,
    ``msg-<id>``, ``round-<message id>-<round>``, ``call-<id>``) opens the window that holds it;
    ``turn=n`` (the jump form) redirects to ``at=turn-n#turn-n``; ``view`` is ``errors`` (the
    runs with failed calls, those calls only) or ``collapsed``."""
    project = current_project()
    try:
        after = _message_cursor()
        view = _view_arg()
        anchor = _anchor_arg()
        turn = int_arg("turn", None, minimum=1)
    except BadParameter as exc:
        return bad_parameter_response(exc, fmt)
    if turn is not None and not wants_json(fmt):
        target = url_for(
            "conversations.conversation_get",
            conversation_id=conversation_id,
            at=f"turn-{turn}",
            view=view or None,
        )
        return redirect(f"{target}#turn-{turn}")
    if turn is not None:
        anchor = model.Anchor("turn", turn=turn)
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "conversation")
    live = LiveCursor(conversation.updated_at, queries.newest_call_id())
    start = None
    if after is None and view != "errors":
        start = _window(conversation, anchor)
        if anchor is not None and start is None:
            return not_found("turn" if anchor.kind == "turn" else "anchor")
    page = load_page(conversation, after, start=start, errors_only=view == "errors")
    data = {
        "conversation": conversation,
        # The address agents know (their own id), next to the row id in `conversation`.
        "address": conversation_address(conversation.external_id),
        "messages": page.messages,
        "next_cursor": page.next_cursor,
        "next_url": (
            page_url(conversation, page.next_cursor, "json", view) if page.next_cursor else None
        ),
        "page": page,
        "view": view,
        "anchor": anchor.name if anchor else None,
        # Where a call beyond its run's first chunk is: the page loads that run's chunks.
        "anchor_message": start.message_id if start else None,
        "windowed": start is not None,
        "live_url": live_url(conversation, page, live),
        "poll_seconds": poll_seconds(conversation),
    }
    if wants_fragment():
        return render_template("conversations/_timeline.html", **data)
    if not wants_json(fmt) or after is None:
        data["stats"] = stats_queries.conversation_stats([conversation.id])[conversation.id]
        data["tools_offered"] = tool_definition_names(conversation.id)
        data["otel"] = _otel(project.id, conversation, page)
    if not wants_json(fmt) and after is None:
        # The conversation's runs (views.runs; their JSON twin is .../runs.json): one statement.
        data["runs"] = conversation_runs(conversation, RUNS_ON_CONVERSATION)
    keys = ("conversation", "address", "stats", "tools_offered", "otel") if after is None else ()
    return respond(
        data,
        page="conversations/conversation.html",
        fmt=fmt,
        json_keys=(*keys, "messages", "next_cursor", "next_url"),
    )


@dataclass(frozen=True, slots=True)
class OtelPanel:
    """What the page says about OTLP: its turns, and the content-capture hint when some of
    them came without content."""

    turns: int
    turns_without_content: int
    hint: ContentHint | None


def _otel(
    project_id: int, conversation: ConversationRecord, page: TimelinePage
) -> OtelPanel | None:
    """Only for pages that show OTLP rows: one query, two with the hint."""
    if not any(mv.source == "otlp" for mv in page.messages):
        return None
    found = otel_queries.conversation_otel(conversation.id)
    hint = None
    if found.turns_without_content:
        hint = content_hint(otel_queries.llm_scope_names(project_id, conversation.id))
    return OtelPanel(found.turns, found.turns_without_content, hint)


@twin_get(bp, "/conversations/<int:conversation_id>/messages/<bigint:message_id>/calls")
def message_calls_get(conversation_id: int, message_id: int, fmt: str):
    """The next chunk of a long run's calls, after the ``after=round.sequence`` key."""
    project = current_project()
    raw_after = request.args.get("after", "")
    try:
        after = model.parse_call_key(raw_after) if raw_after else None
    except ValueError:
        return bad_parameter_response(
            BadParameter("after", "must be 'round.sequence', e.g. 3.0"), fmt
        )
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "message")
    message = or_404(queries.get_message(conversation_id, message_id), "message")
    calls, more = queries.call_chunk(message.id, after, model.CALLS_PER_CHUNK)
    run = model.run_view(
        message,
        calls,
        ctx=badge_context(conversation),
        usage=queries.service_calls([message.id]).get(message.id),
        has_more=more,
        continued_round=after[0] if after else None,
        with_waterfall=False,
    )
    data = {"conversation": conversation, "message": message, "run": run}
    return respond(
        data,
        page="conversations/run_calls.html",
        fragment="conversations/_run.html",
        fmt=fmt,
        json_keys=("run",),
    )


@bp.get("/conversations/<int:conversation_id>/messages/<bigint:message_id>/content")
def message_content_get(conversation_id: int, message_id: int):
    """A folded message text in full ("show all")."""
    project = current_project()
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "message")
    message = or_404(queries.get_message(conversation_id, message_id), "message")
    data = {
        "conversation": conversation,
        "message": message,
        "content": render_text(message.content, limit=None),
        "content_id": f"content-{message.id}",
        "prose": True,
    }
    return respond(
        data, page="conversations/message_content.html", fragment="conversations/_content.html"
    )


@bp.get("/conversations/<int:conversation_id>/live")
def conversation_live_get(conversation_id: int):
    """The live view's poll. Nothing new: 204 after one query. Otherwise the messages after the
    last one shown (replacing the poller, which comes back at their end), shown messages that
    may have changed (swapped in place by id) and the header counts."""
    project_id = current_project_id()
    try:
        after = _message_cursor("after")
        newest_call = int_arg("calls", 0)
        version = _version_arg()
    except BadParameter as exc:
        return bad_parameter_response(exc)
    assert newest_call is not None
    state = queries.live_state(project_id, conversation_id, after, newest_call)
    if state is None:
        return "", 286  # htmx stops polling on 286: the conversation is gone.
    if state.updated_at == version and not state.new_messages and not state.new_calls:
        return "", 204
    conversation = find_conversation(project_id, row_id=conversation_id)
    if conversation is None:
        return "", 286
    live = LiveCursor(state.updated_at, queries.newest_call_id())
    page = load_page(conversation, after)
    refreshed: list[model.MessageView] = []
    if after is not None:
        changed = queries.messages_to_refresh(conversation.id, after, newest_call)
        refreshed = message_views(conversation, changed, turns_before=0)
    return render_template(
        "conversations/_live_update.html",
        conversation=conversation,
        page=page,
        refreshed=refreshed,
        stats=stats_queries.conversation_stats([conversation.id])[conversation.id],
        live_url=live_url(conversation, page, live),
        poll_seconds=poll_seconds(conversation),
    )


def _anchor_arg() -> model.Anchor | None:
    raw = request.args.get("at", "")
    if not raw:
        return None
    try:
        return model.parse_anchor(raw)
    except ValueError:
        raise BadParameter(
            "at", "must be turn-<n>, msg-<id>, round-<message id>-<round> or call-<id>"
        ) from None


@twin_get(bp, "/conversations/<int:conversation_id>/turns")
def conversation_turns_get(conversation_id: int, fmt: str):
    """The turn index: every turn with its calls and errors, each a link that opens the
    window at that turn. Loaded when the index is opened; two queries."""
    project = current_project()
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "conversation")
    turns = queries.turn_index(conversation.id)
    data = {
        "conversation": conversation,
        "turns": turns,
        "errors": sum(1 for t in turns if t.errors or t.failed_runs),
    }
    return respond(
        data,
        page="conversations/turns.html",
        fragment="conversations/_turns.html",
        fmt=fmt,
        json_keys=("turns",),
    )


def _version_arg() -> datetime | None:
    raw = request.args.get("v", "")
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise BadParameter("v", "must be an ISO 8601 timestamp") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
