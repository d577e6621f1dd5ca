"""Reads behind the conversation page: pages of messages, the first calls of
each assistant run (one window-function query for a whole page), further chunks of a run's
calls, and the live view's "anything new?" check.

Messages are ordered by (created_at, id) — the replay's order — and paged by that key. Calls are
ordered by (round_index, sequence_index, id) within their message and paged by that key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, exists, func, literal, or_, select
from sqlalchemy.orm import aliased

from ..db import db
from ..models import Conversation, Message, ServiceCall, ToolInvocation
from ..sql import after_key, as_int, awaiting_response
from .records import (
    CallRecord,
    MessageCallSummary,
    MessageRecord,
    ServiceCallRecord,
)

T = ToolInvocation


# A message as the readers use it (the timeline, the replay's histories).
MESSAGE_COLUMNS = (
    Message.id,
    Message.external_id,
    Message.role,
    Message.content,
    Message.created_at,
    Message.status,
    Message.model,
    Message.content_tokens,
    Message.imported,
)


def _message(row: Any) -> MessageRecord:
    return MessageRecord(
        id=row.id,
        external_id=row.external_id,
        role=row.role,
        content=row.content,
        created_at=row.created_at,
        status=row.status,
        model=row.model,
        content_tokens=row.content_tokens,
        imported=row.imported,
    )


def message_page(
    conversation_id: int,
    after: tuple[datetime, int] | None,
    limit: int,
    *,
    start: tuple[datetime, int] | None = None,
    errors_only: bool = False,
) -> tuple[list[MessageRecord], bool]:
    """Up to ``limit`` messages after the keyset ``after`` (or from ``start`` on, included),
    and whether more follow. ``errors_only``: assistant messages with a failed call or a run
    that did not complete."""
    stmt = select(*MESSAGE_COLUMNS).where(Message.conversation_id == conversation_id)
    if after is not None:
        stmt = stmt.where(after_key((Message.created_at, Message.id), after, descending=False))
    if start is not None:
        stmt = stmt.where(_at_or_after(start))
    if errors_only:
        failed_call = select(literal(1)).where(T.message_id == Message.id, T.is_error)
        stmt = stmt.where(
            Message.role == "assistant",
            or_(exists(failed_call), Message.status.in_(("failed", "cancelled"))),
        )
    rows = db.session.execute(stmt.order_by(Message.created_at, Message.id).limit(limit + 1)).all()
    return [_message(r) for r in rows[:limit]], len(rows) > limit


def _at_or_after(key: tuple[datetime, int]) -> Any:
    created_at, row_id = key
    return or_(
        Message.created_at > created_at,
        and_(Message.created_at == created_at, Message.id >= row_id),
    )


def _up_to(key: tuple[datetime, int]) -> Any:
    created_at, row_id = key
    return or_(
        Message.created_at < created_at,
        and_(Message.created_at == created_at, Message.id <= row_id),
    )


@dataclass(frozen=True, slots=True)
class TurnEntry:
    """One line of the turn index: turn ``turn`` starts at user message ``message_id``."""

    turn: int
    message_id: int
    created_at: datetime
    calls: int
    errors: int
    # An assistant run of the turn failed or was cancelled.
    failed_runs: int
    # The start of the user message's text (at most OPENING_CHARS characters; None: no text):
    # the index shows each turn's first words.
    opening: str | None = None


# How much of a turn's user message the turn index reads (it shows the first words).
OPENING_CHARS = 120


def turn_index(conversation_id: int) -> list[TurnEntry]:
    """Every turn of a conversation with its call and error counts and the start of its user
    message, in ONE query: a running count of user messages numbers the turns, and each
    message's calls are counted by turn. Messages before the first user message (turn 0) are
    left out."""
    per_message = (
        select(
            T.message_id.label("message_id"),
            func.count().label("calls"),
            func.sum(case((T.is_error, 1), else_=0)).label("errors"),
        )
        .group_by(T.message_id)
        .subquery()
    )
    numbered = (
        select(
            Message.id,
            Message.role,
            Message.created_at,
            Message.status,
            func.sum(case((Message.role == "user", 1), else_=0))
            .over(order_by=(Message.created_at, Message.id))
            .label("turn"),
            func.coalesce(per_message.c.calls, 0).label("calls"),
            func.coalesce(per_message.c.errors, 0).label("errors"),
        )
        .outerjoin(per_message, per_message.c.message_id == Message.id)
        .where(Message.conversation_id == conversation_id)
        .subquery()
    )
    user = case((numbered.c.role == "user", numbered.c.id), else_=None)
    turns = (
        select(
            numbered.c.turn,
            func.max(user).label("message_id"),
            func.min(numbered.c.created_at).label("created_at"),
            func.sum(numbered.c.calls).label("calls"),
            func.sum(numbered.c.errors).label("errors"),
            func.sum(case((numbered.c.status.in_(("failed", "cancelled")), 1), else_=0)).label(
                "failed_runs"
            ),
        )
        .where(numbered.c.turn > 0)
        .group_by(numbered.c.turn)
        .subquery()
    )
    # The user message's first characters, read in the same query (a long text is not loaded).
    opening = func.substr(Message.content, 1, OPENING_CHARS).label("opening")
    rows = db.session.execute(
        select(turns, opening)
        .outerjoin(Message, Message.id == turns.c.message_id)
        .order_by(turns.c.turn)
    ).all()
    return [
        TurnEntry(
            turn=as_int(r.turn),
            message_id=r.message_id,
            created_at=r.created_at,
            calls=as_int(r.calls),
            errors=as_int(r.errors),
            failed_runs=as_int(r.failed_runs),
            opening=r.opening,
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class WindowStart:
    """Where a timeline window opens: its first message (included) and the turns before it."""

    key: tuple[datetime, int] | None  # None: from the conversation's first message
    turns_before: int
    # The message the anchor named (or the call's message), when it was one.
    message_id: int | None = None


def turn_start(conversation_id: int, turn: int) -> WindowStart | None:
    """The window that opens at turn ``turn`` (1-based): its user message. ONE query."""
    if turn < 1:
        return None
    row = db.session.execute(
        select(Message.created_at, Message.id)
        .where(Message.conversation_id == conversation_id, Message.role == "user")
        .order_by(Message.created_at, Message.id)
        .offset(turn - 1)
        .limit(1)
    ).first()
    return WindowStart((row.created_at, row.id), turn - 1) if row else None


def anchor_start(
    conversation_id: int, *, message_id: int | None = None, call_id: int | None = None
) -> WindowStart | None:
    """The window that shows a message (or the message of a call) with its turn's start: the
    turn's user message, or the conversation's first message when no user message precedes.
    TWO queries, whatever the size of the conversation; None when not in this conversation."""
    target = select(Message.created_at, Message.id).where(
        Message.conversation_id == conversation_id
    )
    if call_id is not None:
        target = target.where(
            Message.id == select(T.message_id).where(T.id == call_id).scalar_subquery()
        )
    else:
        target = target.where(Message.id == message_id)
    found = db.session.execute(target).first()
    if found is None:
        return None
    key = (found.created_at, found.id)
    users_up_to = (
        select(Message.created_at, Message.id)
        .where(
            Message.conversation_id == conversation_id,
            Message.role == "user",
            _up_to(key),
        )
        .subquery()
    )
    row = db.session.execute(
        select(
            func.count().label("turns"),
            func.max(users_up_to.c.created_at).label("latest"),
        ).select_from(users_up_to)
    ).first()
    turns = as_int(row.turns if row else 0)
    if not turns:
        return WindowStart(None, 0, found.id)
    # From the turn's user message on (time ties: from the first message of that instant).
    return WindowStart((row.latest, 0), turns - 1, found.id)


def turns_before(conversation_id: int, after: tuple[datetime, int] | None) -> int:
    """How many user messages (turns) come up to and including the keyset ``after``."""
    if after is None:
        return 0
    created_at, row_id = after
    return as_int(
        db.session.scalar(
            select(func.count()).where(
                Message.conversation_id == conversation_id,
                Message.role == "user",
                or_(
                    Message.created_at < created_at,
                    and_(Message.created_at == created_at, Message.id <= row_id),
                ),
            )
        )
    )


def turn_numbers(conversation_id: int, message_ids: Sequence[int]) -> dict[int, int]:
    """The turn of each of ``message_ids`` (user messages up to it), in ONE query."""
    if not message_ids:
        return {}
    user = aliased(Message)
    count = (
        select(func.count())
        .where(
            user.conversation_id == conversation_id,
            user.role == "user",
            or_(
                user.created_at < Message.created_at,
                and_(user.created_at == Message.created_at, user.id <= Message.id),
            ),
        )
        .correlate(Message)
        .scalar_subquery()
    )
    rows = db.session.execute(select(Message.id, count).where(Message.id.in_(message_ids)))
    return {row[0]: as_int(row[1]) for row in rows}


def get_message(conversation_id: int, message_id: int) -> MessageRecord | None:
    row = db.session.execute(
        select(*MESSAGE_COLUMNS).where(
            Message.id == message_id, Message.conversation_id == conversation_id
        )
    ).first()
    return _message(row) if row else None


def call_columns() -> tuple[Any, ...]:
    return (
        T.id,
        T.message_id,
        T.round_index,
        T.sequence_index,
        T.external_tool_call_id,
        T.function_name,
        T.arguments,
        T.created_at,
        T.started_at,
        T.ended_at,
        T.response.is_not(None).label("has_response"),
        T.response_created_at,
        T.is_error,
        T.redactions,
        T.arguments_tokens,
        T.response_tokens,
        T.response_bytes,
        # Only what source compaction needs: responses that look like a JSON list.
        case((func.substr(T.response, 1, 1) == "[", T.response), else_=None).label("list_response"),
    )


def call_record(row: Any) -> CallRecord:
    """A CallRecord from a row selected with :func:`call_columns`."""
    return CallRecord(
        id=row.id,
        message_id=row.message_id,
        round_index=row.round_index,
        sequence_index=row.sequence_index,
        external_tool_call_id=row.external_tool_call_id or "",
        function_name=row.function_name,
        arguments=row.arguments,
        created_at=row.created_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        has_response=bool(row.has_response),
        response_created_at=row.response_created_at,
        is_error=bool(row.is_error),
        redactions=tuple(row.redactions or ()),
        arguments_tokens=row.arguments_tokens,
        response_tokens=row.response_tokens,
        response_bytes=row.response_bytes,
        list_response=row.list_response,
    )


@dataclass(frozen=True, slots=True)
class FirstCalls:
    calls: dict[int, list[CallRecord]]
    summaries: dict[int, MessageCallSummary]


def first_calls(
    message_ids: Sequence[int], per_message: int, *, errors_only: bool = False
) -> FirstCalls:
    """The first ``per_message`` calls of each message (of its failed calls, ``errors_only``)
    and per-message totals, in ONE query: window functions number the calls and count them
    within each message."""
    if not message_ids:
        return FirstCalls({}, {})
    partition = {"partition_by": T.message_id}
    order = {"order_by": (T.round_index, T.sequence_index, T.id)}
    if errors_only:
        # The running count of failed calls numbers them; other calls are filtered out below.
        position = func.sum(case((T.is_error, 1), else_=0)).over(**order, **partition)
    else:
        position = func.row_number().over(**order, **partition)
    inner = (
        select(
            *call_columns(),
            position.label("position"),
            func.count().over(**partition).label("total"),
            func.sum(case((T.is_error, 1), else_=0)).over(**partition).label("errors"),
            func.sum(case((awaiting_response(T), 1), else_=0)).over(**partition).label("missing"),
            func.max(T.round_index).over(**partition).label("last_round"),
        )
        .where(T.message_id.in_(message_ids))
        .subquery()
    )
    stmt = select(inner).where(inner.c.position <= per_message)
    if errors_only:
        stmt = stmt.where(inner.c.is_error)
    rows = db.session.execute(stmt.order_by(inner.c.message_id, inner.c.position))
    calls: dict[int, list[CallRecord]] = defaultdict(list)
    summaries: dict[int, MessageCallSummary] = {}
    for row in rows:
        calls[row.message_id].append(call_record(row))
        summaries.setdefault(
            row.message_id,
            MessageCallSummary(
                calls=as_int(row.total),
                errors=as_int(row.errors),
                missing=as_int(row.missing),
                rounds=as_int(row.last_round) + 1,
            ),
        )
    return FirstCalls(dict(calls), summaries)


def call_chunk(
    message_id: int, after: tuple[int, int] | None, limit: int
) -> tuple[list[CallRecord], bool]:
    """Calls of one message after the (round_index, sequence_index) key, and whether more
    follow."""
    stmt = select(*call_columns()).where(T.message_id == message_id)
    if after is not None:
        stmt = stmt.where(after_key((T.round_index, T.sequence_index), after, descending=False))
    rows = db.session.execute(
        stmt.order_by(T.round_index, T.sequence_index, T.id).limit(limit + 1)
    ).all()
    return [call_record(r) for r in rows[:limit]], len(rows) > limit


def service_calls(message_ids: Sequence[int]) -> dict[int, dict[int, ServiceCallRecord]]:
    """Per message, per round index: the LLM call's model and usage, with the round's calls
    counted and their argument tokens summed (the denominator of each call's share of the
    round's cost, whichever of the round's calls a view shows). One query."""
    if not message_ids:
        return {}
    weights = (
        select(
            T.message_id,
            T.round_index,
            func.count().label("calls"),
            func.coalesce(func.sum(T.arguments_tokens), 0).label("tokens"),
        )
        .where(T.message_id.in_(message_ids))
        .group_by(T.message_id, T.round_index)
        .subquery()
    )
    rows = db.session.execute(
        select(ServiceCall, weights.c.calls, weights.c.tokens)
        .outerjoin(
            weights,
            and_(
                weights.c.message_id == ServiceCall.message_id,
                weights.c.round_index == ServiceCall.round_index,
            ),
        )
        .where(ServiceCall.message_id.in_(message_ids))
    )
    result: dict[int, dict[int, ServiceCallRecord]] = defaultdict(dict)
    for sc, calls, tokens in rows:
        result[sc.message_id][sc.round_index] = ServiceCallRecord(
            message_id=sc.message_id,
            round_index=sc.round_index,
            model=sc.model,
            input_tokens=sc.input_tokens,
            output_tokens=sc.output_tokens,
            cached_tokens=sc.cached_tokens,
            cost_usd=sc.cost_usd,
            started_at=sc.started_at,
            ended_at=sc.ended_at,
            content=sc.content,
            reasoning=sc.reasoning,
            created_at=sc.created_at,
            round_calls=as_int(calls),
            round_arguments_tokens=as_int(tokens),
        )
    return dict(result)


def newest_call_id() -> int:
    """The highest tool-call row id anywhere: row ids only grow, so "calls after this id" is
    a cheap primary-key range for the live view."""
    return as_int(db.session.scalar(select(func.max(T.id))))


@dataclass(frozen=True, slots=True)
class LiveState:
    updated_at: datetime
    new_messages: bool
    new_calls: bool


def live_state(
    project_id: int, conversation_id: int, after: tuple[datetime, int] | None, after_call_id: int
) -> LiveState | None:
    """ONE query: the conversation's updated_at, whether messages follow the last one shown
    and whether calls newer than ``after_call_id`` exist in it. None if the conversation is
    gone."""
    later_messages = select(literal(1)).where(Message.conversation_id == conversation_id)
    if after is not None:
        later_messages = later_messages.where(
            after_key((Message.created_at, Message.id), after, descending=False)
        )
    later_calls = (
        select(literal(1))
        .select_from(T)
        .join(Message, Message.id == T.message_id)
        .where(T.id > after_call_id, Message.conversation_id == conversation_id)
    )
    row = db.session.execute(
        select(
            Conversation.updated_at,
            exists(later_messages).label("new_messages"),
            exists(later_calls).label("new_calls"),
        ).where(Conversation.id == conversation_id, Conversation.project_id == project_id)
    ).first()
    if row is None:
        return None
    return LiveState(row.updated_at, bool(row.new_messages), bool(row.new_calls))


# At most this many already-shown messages are re-rendered by one live update.
MAX_REFRESHED_MESSAGES = 20


def messages_to_refresh(
    conversation_id: int, upto: tuple[datetime, int], after_call_id: int
) -> list[MessageRecord]:
    """Shown messages (up to the keyset ``upto``) that may have changed: runs still in
    progress, messages with new calls, and the latest assistant message (where responses and
    final text arrive)."""
    latest_assistant = (
        select(Message.id)
        .where(Message.conversation_id == conversation_id, Message.role == "assistant")
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    with_new_calls = select(T.message_id).where(T.id > after_call_id)
    created_at, row_id = upto
    rows = db.session.execute(
        select(*MESSAGE_COLUMNS)
        .where(
            Message.conversation_id == conversation_id,
            or_(
                Message.created_at < created_at,
                and_(Message.created_at == created_at, Message.id <= row_id),
            ),
            or_(
                Message.status == "in_progress",
                Message.id.in_(with_new_calls),
                Message.id == latest_assistant,
            ),
        )
        .order_by(Message.created_at.desc(), Message.id.desc())
        .limit(MAX_REFRESHED_MESSAGES)
    ).all()
    return [_message(r) for r in reversed(rows)]
