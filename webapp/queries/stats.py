"""Per-conversation aggregates: three GROUP BY queries for any number of conversations."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from sqlalchemy import case, func, select

from ..db import db
from ..models import Message, ServiceCall, ToolInvocation
from .records import ConversationStats
from .sql import as_int

FAILED_STATUSES = ("failed", "cancelled")


def message_counts(conversation_ids: Sequence[int]):
    """(conversation_id, messages, turns, failed runs) per conversation, as a subquery-able
    select."""
    return (
        select(
            Message.conversation_id.label("conversation_id"),
            func.count().label("messages"),
            func.sum(case((Message.role == "user", 1), else_=0)).label("turns"),
            func.sum(case((Message.status.in_(FAILED_STATUSES), 1), else_=0)).label("failed"),
        )
        .where(Message.conversation_id.in_(conversation_ids))
        .group_by(Message.conversation_id)
    )


def call_counts(conversation_ids: Sequence[int]):
    return (
        select(
            Message.conversation_id.label("conversation_id"),
            func.count(ToolInvocation.id).label("calls"),
            func.sum(case((ToolInvocation.is_error, 1), else_=0)).label("errors"),
            func.sum(case((ToolInvocation.response.is_(None), 1), else_=0)).label("missing"),
        )
        .join(Message, Message.id == ToolInvocation.message_id)
        .where(Message.conversation_id.in_(conversation_ids))
        .group_by(Message.conversation_id)
    )


def usage_sums(conversation_ids: Sequence[int]):
    return (
        select(
            Message.conversation_id.label("conversation_id"),
            func.sum(ServiceCall.input_tokens).label("input_tokens"),
            func.sum(ServiceCall.output_tokens).label("output_tokens"),
            func.sum(ServiceCall.cost_usd).label("cost_usd"),
        )
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.conversation_id.in_(conversation_ids))
        .group_by(Message.conversation_id)
    )


def conversation_stats(conversation_ids: Sequence[int]) -> dict[int, ConversationStats]:
    """Aggregates for each of ``conversation_ids`` (missing ones get zeros). Three queries."""
    if not conversation_ids:
        return {}
    values: dict[int, dict[str, object]] = {cid: {} for cid in conversation_ids}
    for row in db.session.execute(message_counts(conversation_ids)):
        values[row.conversation_id].update(
            messages=as_int(row.messages), turns=as_int(row.turns), failed_runs=as_int(row.failed)
        )
    for row in db.session.execute(call_counts(conversation_ids)):
        values[row.conversation_id].update(
            calls=as_int(row.calls),
            errors=as_int(row.errors),
            missing_responses=as_int(row.missing),
        )
    for row in db.session.execute(usage_sums(conversation_ids)):
        values[row.conversation_id].update(
            input_tokens=as_int(row.input_tokens),
            output_tokens=as_int(row.output_tokens),
            cost_usd=Decimal(row.cost_usd) if row.cost_usd is not None else None,
        )
    return {cid: ConversationStats(**fields) for cid, fields in values.items()}  # type: ignore[arg-type]
