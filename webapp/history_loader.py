"""Load a conversation's stored history as the replay library's plain data objects.

Four queries whatever the size of the conversation (messages, tool calls, service calls, tool
definitions); everything is grouped in Python. The replay itself never touches the database.

``load_history`` takes a ``Conversation`` row. ``load_history_with_tokens`` takes the few
conversation fields it needs (so a caller that read them in its own query loads nothing twice)
and also returns the token counts stored at ingestion, keyed by the text they count: the replay's
token counter looks a text up there before it tokenizes anything (see ``webapp.replay_tokens``).
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import select

from .db import db
from .models import Channel, Conversation, Message, Project, ServiceCall, ToolDefinition
from .models import ToolInvocation as ToolRow
from .replay.history import History
from .replay.history import Message as HistoryMessage
from .replay.history import ServiceCall as HistoryServiceCall
from .replay.history import ToolCall as HistoryToolCall
from .replay.history import ToolDefinition as HistoryToolDefinition
from .replay.jsonfast import dumps


@dataclass(frozen=True, slots=True)
class ConversationRef:
    """What the loader needs to know about a conversation besides its rows."""

    id: int
    external_id: str
    channel: str | None = None
    system_prompt: str | None = None


@dataclass(slots=True)
class LoadedHistory:
    history: History
    # Text → token count stored at ingestion: results, argument JSON, message contents.
    stored_tokens: dict[str, int] = field(default_factory=dict)
    # The model of the latest assistant message: what texts without a stored count are
    # tokenized for.
    model: str | None = None


def load_history(conversation: Conversation) -> History:
    ref = ConversationRef(
        id=conversation.id,
        external_id=conversation.external_id,
        channel=conversation.channel.name if conversation.channel else None,
        system_prompt=conversation.system_prompt,
    )
    return _load(ref, with_tokens=False).history


def load_history_with_tokens(conversation: ConversationRef) -> LoadedHistory:
    return _load(conversation, with_tokens=True)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Loading creates tens of thousands of small objects and no reference cycles; the cyclic
    collector would walk the growing heap again and again meanwhile (the replay pauses it for
    the same reason). Reference counting still frees everything."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load(conversation: ConversationRef, *, with_tokens: bool) -> LoadedHistory:
    with _gc_paused():
        return _load_rows(conversation, with_tokens=with_tokens)


def _load_rows(conversation: ConversationRef, *, with_tokens: bool) -> LoadedHistory:
    stored: dict[str, int] = {}
    messages = db.session.execute(
        select(
            Message.id,
            Message.external_id,
            Message.role,
            Message.content,
            Message.created_at,
            Message.status,
            Message.model,
            Message.content_tokens,
        )
        .where(Message.conversation_id == conversation.id)
        .order_by(Message.created_at, Message.id)
    ).all()

    calls_by_message: dict[int, list[HistoryToolCall]] = defaultdict(list)
    call_rows = db.session.execute(
        select(
            ToolRow.message_id,
            ToolRow.id,
            ToolRow.external_tool_call_id,
            ToolRow.function_name,
            ToolRow.arguments,
            ToolRow.round_index,
            ToolRow.sequence_index,
            ToolRow.created_at,
            ToolRow.response,
            ToolRow.response_created_at,
            ToolRow.is_error,
            ToolRow.redactions,
            ToolRow.arguments_tokens,
            ToolRow.response_tokens,
        )
        .join(Message, Message.id == ToolRow.message_id)
        .where(Message.conversation_id == conversation.id)
        .order_by(ToolRow.message_id, ToolRow.round_index, ToolRow.sequence_index)
    )
    for row in call_rows:
        calls_by_message[row.message_id].append(
            HistoryToolCall(
                row_id=row.id,
                external_id=row.external_tool_call_id,
                function_name=row.function_name,
                arguments=row.arguments,
                round_index=row.round_index,
                sequence_index=row.sequence_index,
                created_at=row.created_at,
                response=row.response,
                response_created_at=row.response_created_at,
                is_error=row.is_error,
                redacted=bool(row.redactions),
            )
        )
        if with_tokens:
            if row.response is not None and row.response_tokens is not None:
                stored[row.response] = row.response_tokens
            if row.arguments is not None and row.arguments_tokens is not None:
                # Ingestion counted the compact JSON the replay sends. PostgreSQL's JSONB may
                # hand the keys back in another order: same tokens, so the count still holds.
                stored[dumps(row.arguments)] = row.arguments_tokens

    usage_by_message: dict[int, list[HistoryServiceCall]] = defaultdict(list)
    # Columns, not ORM objects: building thousands of instrumented instances costs more than
    # the query itself.
    usage_rows = db.session.execute(
        select(
            ServiceCall.message_id,
            ServiceCall.round_index,
            ServiceCall.model,
            ServiceCall.input_tokens,
            ServiceCall.output_tokens,
            ServiceCall.cached_tokens,
            ServiceCall.created_at,
        )
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.conversation_id == conversation.id)
        .order_by(ServiceCall.message_id, ServiceCall.round_index)
    )
    for usage in usage_rows:
        usage_by_message[usage.message_id].append(
            HistoryServiceCall(
                round_index=usage.round_index,
                model=usage.model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_tokens=usage.cached_tokens,
                created_at=usage.created_at,
            )
        )

    definitions = db.session.execute(
        select(ToolDefinition.name, ToolDefinition.description, ToolDefinition.parameters)
        .where(ToolDefinition.conversation_id == conversation.id)
        .order_by(ToolDefinition.name)
    )
    model = None
    if with_tokens:
        for m in messages:
            if m.content is not None and m.content_tokens is not None:
                stored[m.content] = m.content_tokens
            if m.role == "assistant" and m.model:
                model = m.model  # rows are in time order: the last one wins
    history = History(
        conversation_id=conversation.external_id,
        channel=conversation.channel,
        system_prompt=conversation.system_prompt,
        tool_definitions=tuple(
            HistoryToolDefinition(d.name, d.description, d.parameters) for d in definitions
        ),
        messages=tuple(
            HistoryMessage(
                row_id=m.id,
                external_id=m.external_id,
                role=m.role,
                content=m.content,
                created_at=m.created_at,
                status=m.status,
                model=m.model,
                tool_calls=tuple(calls_by_message.get(m.id, ())),
                service_calls=tuple(usage_by_message.get(m.id, ())),
            )
            for m in messages
        ),
    )
    return LoadedHistory(history, stored, model)


def freshness_window(project: Project, channel: Channel | None) -> float | None:
    """The configured freshness window: the channel's override, else the project's default.

    None means "off" (results never go stale). A request may still override either.
    """
    if channel is not None and channel.freshness_seconds is not None:
        return float(channel.freshness_seconds)
    return None if project.freshness_seconds is None else float(project.freshness_seconds)
