"""Native endpoints: conversations, messages, whole turns, per-round appends and imports, and
the reads of conversations (the list is the dashboard's, ``webapp.queries.conversation_list``)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from flask import g, jsonify
from flask_openapi3 import Tag

from .. import ingest
from ..analytics.filters import range_start
from ..db import utcnow
from ..errors import ApiError
from ..ingest import CallDraft, Invalid, MessageDraft, PreparedMessage, WriteContext
from ..ingest.importers import ImportedConversation, ImportFormatError, import_conversation
from ..ingest.transaction import Write
from ..queries import messages as reads
from ..queries.conversation_list import ListFilters, list_conversations, page_start, search_text
from ..queries.conversations import find_conversation
from ..queries.cursors import CursorError
from ..queries.records import ConversationRecord
from . import bp, drafts, serializers
from .endpoint import cursor_error, endpoint, write_context
from .schemas import (
    WRITE_ERRORS,
    ConversationDetail,
    ConversationList,
    ConversationListQuery,
    ConversationOut,
    ConversationPath,
    ConversationPut,
    ImportCreate,
    MessageList,
    MessageOut,
    MessagesCreate,
    RoundCreate,
    RoundPath,
    TurnCreate,
    TurnOut,
    error_responses,
)

TAG = Tag(name="Conversations", description="Conversations, messages, turns and imports.")


def _check_id(field_path: str, value: str) -> str:
    if not value or len(value) > 255 or "\x00" in value:
        raise Invalid(field_path, "must be 1 to 255 characters")
    return value


def _call_count(message_drafts: list[MessageDraft]) -> int:
    return sum(len(d.calls) for d in message_drafts)


def _prepare(message_drafts: list[MessageDraft]) -> tuple[WriteContext, list[PreparedMessage]]:
    """The request's write context and its messages prepared (before the write lock)."""
    ctx = write_context()
    return ctx, ingest.prepare_messages(ctx, message_drafts)


def _write_messages(
    ctx: WriteContext, cid: str, prepared: list[PreparedMessage]
) -> list[dict[str, Any]]:
    """Write messages into conversation `cid` (created if unknown); the stored rows."""
    conversation_id, _ = ingest.ensure_conversation(ctx.project_id, cid, ctx.now)
    return ingest.store_messages(ctx, conversation_id, cid, prepared)


# --- Answers: stored rows as the API shows them ---------------------------------------------


def _conversation(project_id: int, cid: str) -> ConversationRecord:
    conversation = find_conversation(project_id, external_id=cid)
    if conversation is None:
        raise ApiError(404, f"conversation {cid!r} not found in this project")
    return conversation


def _conversation_out(project_id: int, cid: str) -> dict[str, Any]:
    """The conversation without its messages (the answer to PUT). Two queries."""
    conversation = _conversation(project_id, cid)
    return serializers.conversation(conversation, reads.tool_definitions(conversation.id))


def _conversation_detail(project_id: int, cid: str) -> dict[str, Any]:
    """The conversation with every message, call and usage row. Five queries, whatever size."""
    conversation = _conversation(project_id, cid)
    out = serializers.conversation(conversation, reads.tool_definitions(conversation.id))
    messages = reads.conversation_messages(conversation.id)
    calls, usage = reads.calls_and_usage([m["id"] for m in messages])
    out["messages"] = [
        serializers.message(m, cid, calls[m["id"]], usage[m["id"]]) for m in messages
    ]
    return out


def _messages_out(message_ids: list[int], cid: str) -> list[dict[str, Any]]:
    """Messages with their calls and usage, in the order given. Three queries."""
    rows = reads.messages_by_id(message_ids)
    calls, usage = reads.calls_and_usage(list(rows))
    return [serializers.message(rows[i], cid, calls[i], usage[i]) for i in message_ids]


# --- Store steps: each route's `Write`, run in the write transaction (perhaps twice) ----------


def _store_conversation(
    ctx: WriteContext,
    cid: str,
    body: ConversationPut,
    values: dict[str, Any],
    tools: list[dict[str, Any]] | None,
):
    conversation_id, created = ingest.ensure_conversation(
        ctx.project_id, cid, ctx.now, body.created_at
    )
    changes = dict(values)
    if body.created_at is not None and not created:
        changes["created_at"] = body.created_at
    if body.channel is not None:
        changes["channel_id"] = ingest.ensure_channel(ctx.project_id, body.channel, ctx.now)
    if tools is not None:
        ingest.replace_tool_definitions(conversation_id, tools)
    ingest.update_conversation(conversation_id, changes, ctx.now)
    return jsonify(_conversation_out(ctx.project_id, cid)), 201 if created else 200


def _store_messages(ctx: WriteContext, cid: str, prepared: list[PreparedMessage]):
    rows = _write_messages(ctx, cid, prepared)
    data = _messages_out([r["id"] for r in rows], cid)
    return jsonify({"object": "list", "data": data, "has_more": False}), 201


def _store_turn(ctx: WriteContext, cid: str, prepared: list[PreparedMessage], has_user: bool):
    rows = _write_messages(ctx, cid, prepared)
    out = _messages_out([r["id"] for r in rows], cid)
    return jsonify(
        {"object": "turn", "user": out[0] if has_user else None, "assistant": out[-1]}
    ), 201


def _store_round(ctx: WriteContext, cid: str, prepared: list[PreparedMessage]):
    rows = _write_messages(ctx, cid, prepared)
    return jsonify(_messages_out([rows[0]["id"]], cid)[0]), 201


def _store_import(
    ctx: WriteContext,
    cid: str,
    prepared: list[PreparedMessage],
    imported: ImportedConversation,
    started_at: datetime | None,
):
    conversation_id, _ = ingest.ensure_conversation(ctx.project_id, cid, ctx.now, started_at)
    ingest.store_messages(ctx, conversation_id, cid, prepared)
    if imported.tools:
        ingest.replace_tool_definitions(conversation_id, imported.tools)
    if imported.system_prompt is not None:
        system_prompt = ingest.clean_text(imported.system_prompt)
        values = {"system_prompt": ctx.rules.content_policy.mask(system_prompt)[0]}
        ingest.update_conversation(conversation_id, values, ctx.now)
    return jsonify(_conversation_detail(ctx.project_id, cid)), 201


# --- Routes -----------------------------------------------------------------------------------


@bp.put(
    "/conversations/<cid>",
    tags=[TAG],
    summary="Create or update a conversation",
    responses={200: ConversationOut, 201: ConversationOut, **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def conversation_put(path: ConversationPath, body: ConversationPut):
    """Only the fields given change. `channel` is created by name on first use; `tools`
    replaces the conversation's tool definitions. 201 when created, 200 when updated."""
    cid = _check_id("path.cid", path.cid)
    ctx = write_context()
    values: dict[str, Any] = {}
    if body.title is not None:
        values["title"] = ingest.clean_text(body.title)
    if body.metadata is not None:
        values["metadata"] = body.metadata
    if body.system_prompt is not None:
        values["system_prompt"] = ingest.clean_text(body.system_prompt)
    # The mask rules that name no tool reach the conversation's texts too.
    values, _ = ctx.rules.content_policy.mask(values)
    tools = [t.model_dump() for t in body.tools] if body.tools is not None else None
    return Write(_store_conversation, (ctx, cid, body, values, tools))


@bp.get(
    "/conversations",
    tags=[TAG],
    summary="List conversations, most recently active first",
    responses={200: ConversationList, **error_responses(404, 422)},
)
@endpoint()
def conversations_get(query: ConversationListQuery):
    """Keyset paging: pass `next_cursor` as `cursor` to get the next page. `q` searches ids,
    titles, message texts and ids, and tool names (the dashboard's search)."""
    try:
        after = page_start(query.cursor, "recent")
    except CursorError:
        raise cursor_error(query.cursor, "not a cursor returned by this API") from None
    filters = ListFilters(
        q=search_text(query.q),
        channel=query.channel or None,
        range=query.range,
        since=range_start(query.range, utcnow()) if query.range else None,
    )
    page = list_conversations(g.project.id, filters, after=after, limit=query.limit)
    return jsonify(
        {
            "object": "list",
            "data": [serializers.conversation_summary(row) for row in page.rows],
            "has_more": page.has_more,
            "next_cursor": page.next_cursor,
        }
    )


@bp.get(
    "/conversations/<cid>",
    tags=[TAG],
    summary="A conversation with its messages, tool calls and usage",
    responses={200: ConversationDetail, **error_responses(404, 422)},
)
@endpoint()
def conversation_get(path: ConversationPath):
    return jsonify(_conversation_detail(g.project.id, path.cid))


@bp.delete(
    "/conversations/<cid>",
    tags=[TAG],
    summary="Delete a conversation with its messages, tool calls, usage and OTLP data",
    responses={204: None, **error_responses(404, 422, 503)},
)
@endpoint(write=True)
def conversation_delete(path: ConversationPath):
    """Removes the conversation, its messages, tool calls and usage, and the raw OpenTelemetry
    spans and log records projected into it. 404 if there is no such conversation; all or
    nothing."""
    found = find_conversation(g.project.id, external_id=path.cid)
    if found is None or not ingest.delete_conversation(g.project.id, found.id):
        raise ApiError(404, f"conversation {path.cid!r} not found in this project")
    return "", 204


@bp.post(
    "/conversations/<cid>/messages",
    tags=[TAG],
    summary="Store messages (with their tool calls and usage)",
    responses={201: MessageList, **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def messages_post(path: ConversationPath, body: MessagesCreate):
    """The conversation is created if unknown. Idempotent per message id; an in_progress
    assistant message may be updated. All or nothing."""
    cid = _check_id("path.cid", path.cid)
    drafts.check_count("messages", len(body.messages), "MAX_MESSAGES_PER_REQUEST", "messages")
    message_drafts = [drafts.message(f"messages.{i}", m) for i, m in enumerate(body.messages)]
    drafts.check_count(
        "messages", _call_count(message_drafts), "MAX_TOOLS_PER_REQUEST", "tool calls"
    )
    ctx, prepared = _prepare(message_drafts)
    return Write(_store_messages, (ctx, cid, prepared))


@bp.post(
    "/conversations/<cid>/turns",
    tags=[TAG],
    summary="Store a whole turn (user message, assistant rounds and answer) at once",
    responses={201: TurnOut, **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def turns_post(path: ConversationPath, body: TurnCreate):
    """Round i of `assistant.rounds` gets round_index i; a call's sequence_index defaults
    to its position. One transaction."""
    cid = _check_id("path.cid", path.cid)
    message_drafts = [drafts.turn_assistant(body.assistant)]
    if body.user is not None:
        message_drafts.insert(0, drafts.turn_user(body.user))
    drafts.check_count(
        "assistant.rounds", _call_count(message_drafts), "MAX_TOOLS_PER_REQUEST", "tool calls"
    )
    ctx, prepared = _prepare(message_drafts)
    return Write(_store_turn, (ctx, cid, prepared, body.user is not None))


@bp.post(
    "/conversations/<cid>/messages/<mid>/rounds/<round_index>",
    tags=[TAG],
    summary="Append one round (service call) of an assistant run",
    responses={201: MessageOut, **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def round_post(path: RoundPath, body: RoundCreate):
    """Per-service-call persistence: each round is stored when its model call returns, not
    the whole run at its end. The assistant message is created as `in_progress` if unknown;
    `status` finishes the run and `content` gives its final answer. A round's calls may be
    posted first without responses and again later with them."""
    cid = _check_id("path.cid", path.cid)
    mid = _check_id("path.mid", path.mid)
    drafts.check_count("calls", len(body.calls), "MAX_TOOLS_PER_REQUEST", "tool calls")
    draft = MessageDraft(
        field="message",
        external_id=mid,
        role="assistant",
        content=body.content,
        status=body.status,
        default_status="in_progress",
        calls=drafts.round_calls("calls", path.round_index, body.calls),
    )
    if body.usage is not None:
        draft.usage.append(drafts.usage_draft("usage", body.usage, path.round_index))
    ctx, prepared = _prepare([draft])
    return Write(_store_round, (ctx, cid, prepared))


@bp.post(
    "/conversations/<cid>/import",
    tags=[TAG],
    summary="Import an OpenAI or Anthropic message list as a conversation",
    responses={201: ConversationDetail, **WRITE_ERRORS},
)
@endpoint(write=True, prepares=True)
def conversation_import_post(path: ConversationPath, body: ImportCreate):
    """Rounds and sequence indices are derived from the provider format. Message ids are
    deterministic, so importing the same list again changes nothing. The messages are stamped a
    microsecond apart, the last one just before the import answers (from `started_at` on, when
    given and early enough): all of them exist when it answers, in their order, and anything
    posted later comes after them. The body of a replay export's `payload` (plus `format`)
    recreates a conversation whose replay is that payload again. Bounded by MAX_BODY_BYTES only:
    a long history is one request."""
    cid = _check_id("path.cid", path.cid)
    imported = _read_import(cid, body)
    ctx = write_context()
    times = import_times(len(imported.messages), ctx.now, body.started_at)
    prepared = ingest.prepare_messages(ctx, _import_drafts(imported, times))
    return Write(_store_import, (ctx, cid, prepared, imported, times[0] if times else None))


def _read_import(cid: str, body: ImportCreate) -> ImportedConversation:
    messages = body.input if body.format == "openai-responses" else body.messages
    system = body.instructions if body.format == "openai-responses" else body.system
    prefix = "imp-" + hashlib.sha256(cid.encode()).hexdigest()[:16]
    try:
        return import_conversation(
            body.format, messages=messages, system=system, tools=body.tools, id_prefix=prefix
        )
    except ImportFormatError as exc:
        raise Invalid(exc.field, exc.message) from None


def import_times(count: int, now: datetime, started_at: datetime | None) -> list[datetime]:
    """When each of ``count`` imported messages was stored: a microsecond apart, in order, the
    last one before ``now`` (the moment the import answers for), so a replay right after the
    import sees them all and a message posted later sorts after them. ``started_at`` is the
    first one's time unless it is too late for that."""
    latest_start = now - timedelta(microseconds=count)
    start = latest_start if started_at is None else min(started_at, latest_start)
    return [start + timedelta(microseconds=n) for n in range(count)]


def _import_drafts(imported: ImportedConversation, times: list[datetime]) -> list[MessageDraft]:
    """Imported messages as drafts, marked imported, at the given times."""
    out = []
    for m, created_at in zip(imported.messages, times, strict=True):
        out.append(
            MessageDraft(
                field=m.field,
                external_id=m.id,
                role=m.role,
                content=m.content,
                created_at=created_at,
                imported=True,
                calls=[
                    CallDraft(
                        field=c.field,
                        round_index=c.round_index,
                        sequence_index=c.sequence_index,
                        external_id=c.id,
                        function_name=c.name,
                        arguments=c.arguments,
                        response=c.response,
                        is_error=c.is_error,
                        created_at=created_at,
                        response_created_at=created_at,
                    )
                    for c in m.tool_calls
                ],
            )
        )
    return out
