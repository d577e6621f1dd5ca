"""Native endpoints: conversations, messages, whole turns, per-round appends and imports."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from flask import g, jsonify
from flask_openapi3 import APIBlueprint, Tag

from .. import ingest
from ..importers import ImportedConversation, ImportFormatError, import_conversation
from ..ingest import CallDraft, Invalid, MessageDraft, PreparedMessage, WriteContext
from . import drafts, reads
from .endpoint import endpoint, write_context
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


def _store(ctx: WriteContext, cid: str, prepared: list[PreparedMessage]) -> list[dict[str, Any]]:
    """Write messages into conversation `cid` (created if unknown); the stored rows."""
    conversation_id, _ = ingest.ensure_conversation(ctx.project_id, cid, ctx.now)
    return ingest.store_messages(ctx, conversation_id, cid, prepared)


def register_routes(bp: APIBlueprint) -> None:
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
        tools = [t.model_dump() for t in body.tools] if body.tools is not None else None

        def store():
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
            return jsonify(reads.conversation_out(ctx.project_id, cid)), 201 if created else 200

        return store

    @bp.get(
        "/conversations",
        tags=[TAG],
        summary="List conversations, most recently active first",
        responses={200: ConversationList, **error_responses(422)},
    )
    @endpoint()
    def conversation_list(query: ConversationListQuery):
        """Keyset paging: pass `next_cursor` as `cursor` to get the next page."""
        page = reads.list_conversations(
            g.project.id,
            channel=query.channel,
            q=query.q,
            limit=query.limit,
            cursor=query.cursor,
        )
        return jsonify(page)

    @bp.get(
        "/conversations/<cid>",
        tags=[TAG],
        summary="A conversation with its messages, tool calls and usage",
        responses={200: ConversationDetail, **error_responses(404, 422)},
    )
    @endpoint()
    def conversation_get(path: ConversationPath):
        return jsonify(reads.conversation_detail(g.project.id, path.cid))

    @bp.post(
        "/conversations/<cid>/messages",
        tags=[TAG],
        summary="Store messages (with their tool calls and usage)",
        responses={201: MessageList, **WRITE_ERRORS},
    )
    @endpoint(write=True, prepares=True)
    def messages_create(path: ConversationPath, body: MessagesCreate):
        """The conversation is created if unknown. Idempotent per message id; an in_progress
        assistant message may be updated. All or nothing."""
        cid = _check_id("path.cid", path.cid)
        drafts.check_count("messages", len(body.messages), "MAX_MESSAGES_PER_REQUEST", "messages")
        message_drafts = [drafts.message(f"messages.{i}", m) for i, m in enumerate(body.messages)]
        drafts.check_count(
            "messages", _call_count(message_drafts), "MAX_TOOLS_PER_REQUEST", "tool calls"
        )
        ctx, prepared = _prepare(message_drafts)

        def store():
            rows = _store(ctx, cid, prepared)
            data = reads.messages_out([r["id"] for r in rows], cid)
            return jsonify({"object": "list", "data": data, "has_more": False}), 201

        return store

    @bp.post(
        "/conversations/<cid>/turns",
        tags=[TAG],
        summary="Store a whole turn (user message, assistant rounds and answer) at once",
        responses={201: TurnOut, **WRITE_ERRORS},
    )
    @endpoint(write=True, prepares=True)
    def turn_create(path: ConversationPath, body: TurnCreate):
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

        def store():
            rows = _store(ctx, cid, prepared)
            out = reads.messages_out([r["id"] for r in rows], cid)
            return jsonify(
                {"object": "turn", "user": out[0] if body.user else None, "assistant": out[-1]}
            ), 201

        return store

    @bp.post(
        "/conversations/<cid>/messages/<mid>/rounds/<round_index>",
        tags=[TAG],
        summary="Append one round (service call) of an assistant run",
        responses={201: MessageOut, **WRITE_ERRORS},
    )
    @endpoint(write=True, prepares=True)
    def round_create(path: RoundPath, body: RoundCreate):
        """Per-service-call persistence (seed 002). The assistant message is created as
        `in_progress` if unknown; `status` finishes the run. A round's calls may be posted
        first without responses and again later with them."""
        cid = _check_id("path.cid", path.cid)
        mid = _check_id("path.mid", path.mid)
        drafts.check_count("calls", len(body.calls), "MAX_TOOLS_PER_REQUEST", "tool calls")
        draft = MessageDraft(
            field="message",
            external_id=mid,
            role="assistant",
            status=body.status,
            default_status="in_progress",
            calls=drafts.round_calls("calls", path.round_index, body.calls),
        )
        if body.usage is not None:
            draft.usage.append(drafts.usage_draft("usage", body.usage, path.round_index))
        ctx, prepared = _prepare([draft])

        def store():
            rows = _store(ctx, cid, prepared)
            return jsonify(reads.messages_out([rows[0]["id"]], cid)[0]), 201

        return store

    @bp.post(
        "/conversations/<cid>/import",
        tags=[TAG],
        summary="Import an OpenAI or Anthropic message list as a conversation",
        responses={201: ConversationDetail, **WRITE_ERRORS},
    )
    @endpoint(write=True, prepares=True)
    def conversation_import(path: ConversationPath, body: ImportCreate):
        """Rounds and sequence indices are derived from the provider format. Message ids are
        deterministic, so importing the same list again changes nothing. The body of a replay
        export's `payload` (plus `format`) recreates an equivalent conversation. Bounded by
        MAX_BODY_BYTES only: a long history is one request."""
        cid = _check_id("path.cid", path.cid)
        imported = _read_import(cid, body)
        ctx = write_context()
        started_at = body.started_at or ctx.now
        prepared = ingest.prepare_messages(ctx, _import_drafts(imported, started_at))

        def store():
            conversation_id, _ = ingest.ensure_conversation(ctx.project_id, cid, ctx.now)
            ingest.store_messages(ctx, conversation_id, cid, prepared)
            if imported.tools:
                ingest.replace_tool_definitions(conversation_id, imported.tools)
            if imported.system_prompt is not None:
                values = {"system_prompt": ingest.clean_text(imported.system_prompt)}
                ingest.update_conversation(conversation_id, values, ctx.now)
            return jsonify(reads.conversation_detail(ctx.project_id, cid)), 201

        return store


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


def _import_drafts(imported: ImportedConversation, started_at: Any) -> list[MessageDraft]:
    """Imported messages as drafts; one millisecond apart so they keep their order."""
    out = []
    for n, m in enumerate(imported.messages):
        created_at = started_at + timedelta(milliseconds=n)
        out.append(
            MessageDraft(
                field=m.field,
                external_id=m.id,
                role=m.role,
                content=m.content,
                created_at=created_at,
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
