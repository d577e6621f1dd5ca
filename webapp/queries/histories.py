"""Load stored conversations as the replay library's plain data objects.

One loader for every reader of stored histories: the replay API and pages load one conversation
(:func:`load_history`), the charts many at once (:func:`load_histories`). Either way it takes
four queries (messages, tool calls, service calls, tool definitions, each
``conversation_id IN (...)``) and groups the rows in Python; the replay itself never touches the
database. The conversations come from ``webapp.queries.conversations``.

What comes with the history depends on what the caller does with it (``tokens``):

* ``None``: the history alone.
* ``"text"`` (the replay): the token counts stored at ingestion keyed by the text they count, as
  the replay's token counter looks a text up there before it tokenizes anything (see
  :meth:`LoadedHistory.token_counter`).
* ``"row"`` (the charts): the counts keyed by row id, and result texts only where they may be
  a sources list (the one thing the charts read in a result: source compaction). Every other
  result stays in the database and reads as ``""``; its stored count is what the charts need.
  The service calls' stored costs come with it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from operator import attrgetter
from typing import Any, Literal

from sqlalchemy import case, func, literal, select
from sqlalchemy.sql.elements import ColumnElement

from ..analytics.records import ServiceCallCost
from ..db import db
from ..models import Message, ServiceCall, ToolDefinition
from ..models import ToolInvocation as ToolRow
from ..replay.history import History
from ..replay.history import Message as HistoryMessage
from ..replay.history import ServiceCall as HistoryServiceCall
from ..replay.history import ToolCall as HistoryToolCall
from ..replay.history import ToolDefinition as HistoryToolDefinition
from ..replay.jsonfast import dumps
from ..tokens import count_tokens, stored_counter
from .records import ConversationRecord
from .timeline import MESSAGE_COLUMNS

TokenKeys = Literal["text", "row"]


@dataclass(slots=True)
class LoadedHistory:
    history: History
    # tokens="text": text → token count stored at ingestion (results, argument JSON, message
    # contents).
    stored_tokens: dict[str, int] = field(default_factory=dict)
    # The model of the latest assistant message: what texts without a stored count are
    # tokenized for.
    model: str | None = None
    # tokens="row": the same counts by row id, None where ingestion made none. A result stored
    # without a count is estimated from its size, since its text is not loaded.
    argument_tokens: dict[int, int | None] = field(default_factory=dict)
    result_tokens: dict[int, int | None] = field(default_factory=dict)
    message_tokens: dict[int, int | None] = field(default_factory=dict)
    # tokens="row": the cost stored with each service call, in message and round order.
    costs: tuple[ServiceCallCost, ...] = ()

    def token_counter(self) -> Callable[[str], int]:
        """The replay's token counter (tokens="text"): the stored count of a text, else
        tiktoken's for the model. ``stored_tokens`` is its memo, so the replays of one loaded
        history (a comparison's two sides) share what was counted."""
        return stored_counter(self.stored_tokens, self.model)


def load_history(conversation: ConversationRecord) -> LoadedHistory:
    """One conversation as the replay reads it, with its stored counts by text."""
    return load_histories([conversation], tokens="text")[conversation.id]


def load_histories(
    conversations: Sequence[ConversationRecord], *, tokens: TokenKeys | None = None
) -> dict[int, LoadedHistory]:
    """The histories of ``conversations`` by row id, in four queries whatever their number and
    size."""
    if not conversations:
        return {}
    ids = [c.id for c in conversations]
    # Filled in as the rows arrive; each history is put together once its rows are all read.
    loaded = {c.id: LoadedHistory(_empty_history(c)) for c in conversations}
    messages = _messages(ids, loaded, tokens)
    calls = _tool_calls(ids, loaded, tokens)
    usage = _service_calls(ids, loaded, with_costs=tokens == "row")
    definitions = _definitions(ids)
    for c in conversations:
        loaded[c.id].history = History(
            conversation_id=c.external_id,
            channel=c.channel,
            system_prompt=c.system_prompt,
            tool_definitions=tuple(definitions.get(c.id, ())),
            messages=tuple(
                HistoryMessage(
                    row_id=m.id,
                    external_id=m.external_id,
                    role=m.role,
                    content=m.content,
                    created_at=m.created_at,
                    status=m.status,
                    model=m.model,
                    tool_calls=tuple(calls.get(m.id, ())),
                    service_calls=tuple(usage.get(m.id, ())),
                    imported=m.imported,
                )
                for m in messages.get(c.id, ())
            ),
        )
    return loaded


def _empty_history(c: ConversationRecord) -> History:
    return History(c.external_id, c.channel, c.system_prompt, (), ())


def _messages(
    ids: Sequence[int], loaded: dict[int, LoadedHistory], tokens: TokenKeys | None
) -> dict[int, list[Any]]:
    """Message rows by conversation, in time order; stored counts and the latest model noted."""
    rows = db.session.execute(
        select(Message.conversation_id, *MESSAGE_COLUMNS)
        .where(Message.conversation_id.in_(ids))
        .order_by(Message.created_at, Message.id)
    )
    grouped: dict[int, list[Any]] = defaultdict(list)
    for m in rows:
        grouped[m.conversation_id].append(m)
        out = loaded[m.conversation_id]
        if m.role == "assistant" and m.model:
            out.model = m.model  # rows are in time order: the last one wins
        if tokens == "text":
            if m.content is not None and m.content_tokens is not None:
                out.stored_tokens[m.content] = m.content_tokens
        elif tokens == "row":
            out.message_tokens[m.id] = m.content_tokens
    return grouped


def _list_like(column: Any) -> ColumnElement[Any]:
    """The text only when it may be a sources list; NULL otherwise."""
    first = func.substr(func.ltrim(column, " \t\r\n"), 1, 1)
    return case((first == literal("["), column), else_=None)


def _tool_calls(
    ids: Sequence[int], loaded: dict[int, LoadedHistory], tokens: TokenKeys | None
) -> dict[int, list[HistoryToolCall]]:
    """Tool calls by message row id, in (round, sequence) order; stored counts noted."""
    lists_only = tokens == "row"
    if lists_only:
        # Only texts that may be sources lists leave the database (see the module docstring).
        # A result the token pass has not counted yet comes whole: it is counted here.
        response: list[Any] = [
            case(
                (ToolRow.response_tokens.is_(None), ToolRow.response),
                else_=_list_like(ToolRow.response),
            ).label("response"),
            ToolRow.response.is_not(None).label("has_response"),
            ToolRow.response_bytes,
        ]
    else:
        response = [ToolRow.response]
    rows = db.session.execute(
        select(
            Message.conversation_id,
            ToolRow.message_id,
            ToolRow.id,
            ToolRow.external_tool_call_id,
            ToolRow.function_name,
            ToolRow.arguments,
            ToolRow.round_index,
            ToolRow.sequence_index,
            ToolRow.created_at,
            *response,
            ToolRow.response_created_at,
            ToolRow.is_error,
            ToolRow.redactions,
            ToolRow.arguments_tokens,
            ToolRow.response_tokens,
            Message.model.label("message_model"),
        )
        .join(Message, Message.id == ToolRow.message_id)
        .where(Message.conversation_id.in_(ids))
        .order_by(ToolRow.message_id, ToolRow.round_index, ToolRow.sequence_index)
    )
    calls: dict[int, list[HistoryToolCall]] = defaultdict(list)
    for row in rows:
        text = row.response
        result_tokens = row.response_tokens
        if lists_only:
            if result_tokens is None and text is not None:
                # Not counted yet by the token pass: counted here as the pass will count it;
                # the text is kept only where it may be a sources list, as for the others.
                result_tokens = count_tokens(text, row.message_model)
                if not text.lstrip(" \t\r\n").startswith("["):
                    text = None
            if text is None and row.has_response:
                text = ""
        calls[row.message_id].append(
            HistoryToolCall(
                row_id=row.id,
                external_id=row.external_tool_call_id,
                function_name=row.function_name,
                arguments=row.arguments,
                round_index=row.round_index,
                sequence_index=row.sequence_index,
                created_at=row.created_at,
                response=text,
                response_created_at=row.response_created_at,
                is_error=row.is_error,
                redacted=bool(row.redactions),
            )
        )
        # Inline rather than a helper: this loop runs once per call, 10,000 times for a long
        # replay, and the replay's load time is measured (toolscope bench).
        if tokens == "text":
            stored = loaded[row.conversation_id].stored_tokens
            if text is not None:
                # Not counted yet by the token pass: counted here as the pass will count it
                # (the message's model), so the replay is the same before and after the pass.
                tokens_of_text = row.response_tokens
                if tokens_of_text is None:
                    tokens_of_text = count_tokens(text, row.message_model)
                stored[text] = tokens_of_text
            if row.arguments is not None:
                # The pass counts the compact JSON the replay sends. PostgreSQL's JSONB may
                # hand the keys back in another order: same tokens, so the count still holds.
                arguments_text = dumps(row.arguments)
                tokens_of_text = row.arguments_tokens
                if tokens_of_text is None:
                    tokens_of_text = count_tokens(arguments_text, row.message_model)
                stored[arguments_text] = tokens_of_text
        elif tokens == "row":
            _note_row_tokens(loaded[row.conversation_id], row, result_tokens)
    return calls


def _note_row_tokens(out: LoadedHistory, row: Any, result: int | None) -> None:
    arguments_tokens = row.arguments_tokens
    if arguments_tokens is None and row.arguments is not None:
        # Not counted yet by the token pass: counted here as the pass will count it.
        arguments_tokens = count_tokens(dumps(row.arguments), row.message_model)
    if result is None and row.has_response and row.response_bytes is not None:
        # Ingested without a count: a quarter of its size stands in (the text stays put).
        result = math.ceil(row.response_bytes / 4)
    out.argument_tokens[row.id] = arguments_tokens
    out.result_tokens[row.id] = result


def _service_calls(
    ids: Sequence[int], loaded: dict[int, LoadedHistory], *, with_costs: bool
) -> dict[int, list[HistoryServiceCall]]:
    """Reported usage by message row id, in round order; stored costs noted if asked for."""
    # Columns, not ORM objects: building thousands of instrumented instances costs more than
    # the query itself.
    rows = db.session.execute(
        select(
            Message.conversation_id,
            ServiceCall.message_id,
            ServiceCall.round_index,
            ServiceCall.model,
            ServiceCall.provider,
            ServiceCall.input_tokens,
            ServiceCall.output_tokens,
            ServiceCall.cached_tokens,
            ServiceCall.created_at,
            ServiceCall.cost_usd,
            ServiceCall.price_source,
            ServiceCall.price_version,
        )
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.conversation_id.in_(ids))
        .order_by(ServiceCall.message_id, ServiceCall.round_index)
    )
    usage: dict[int, list[HistoryServiceCall]] = defaultdict(list)
    costs: dict[int, list[ServiceCallCost]] = defaultdict(list)
    for row in rows:
        usage[row.message_id].append(
            HistoryServiceCall(
                round_index=row.round_index,
                model=row.model,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                cached_tokens=row.cached_tokens,
                created_at=row.created_at,
            )
        )
        if with_costs:
            costs[row.conversation_id].append(_cost(row))
    for conversation_id, conversation_costs in costs.items():
        loaded[conversation_id].costs = tuple(conversation_costs)
    return usage


def _cost(row: Any) -> ServiceCallCost:
    return ServiceCallCost(
        message_row_id=row.message_id,
        round_index=row.round_index,
        provider=row.provider,
        cost_usd=None if row.cost_usd is None else Decimal(row.cost_usd),
        price_source=row.price_source,
        price_version=row.price_version,
    )


def _definitions(ids: Iterable[int]) -> dict[int, list[HistoryToolDefinition]]:
    """Tool definitions by conversation, by name."""
    rows = db.session.execute(
        select(
            ToolDefinition.conversation_id,
            ToolDefinition.name,
            ToolDefinition.description,
            ToolDefinition.parameters,
        )
        .where(ToolDefinition.conversation_id.in_(ids))
        .order_by(ToolDefinition.conversation_id, ToolDefinition.name)
    )
    grouped: dict[int, list[HistoryToolDefinition]] = defaultdict(list)
    for d in rows:
        grouped[d.conversation_id].append(
            HistoryToolDefinition(d.name, d.description, d.parameters)
        )
    # By code point, whatever the database's collation: the replay lists renamed tools that way
    # too (see webapp.replay.build), and SQLite and PostgreSQL then agree.
    for definitions in grouped.values():
        definitions.sort(key=attrgetter("name"))
    return grouped
