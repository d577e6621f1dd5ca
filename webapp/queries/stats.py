"""Per-conversation aggregates: one statement for any number of conversations."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from sqlalchemy import case, func, select

from ..db import db
from ..models import Conversation, Message, ServiceCall, ToolInvocation
from ..sql import as_int, awaiting_response
from .records import ConversationStats

FAILED_STATUSES = ("failed", "cancelled")


def conversation_stats(conversation_ids: Sequence[int]) -> dict[int, ConversationStats]:
    """Aggregates for each of ``conversation_ids`` (missing ones get zeros): three GROUP BY
    subqueries (messages, tool calls, usage) joined to the conversations, in one statement."""
    if not conversation_ids:
        return {}
    messages = (
        select(
            Message.conversation_id,
            func.count().label("messages"),
            func.sum(case((Message.role == "user", 1), else_=0)).label("user_messages"),
            func.sum(case((Message.role == "assistant", 1), else_=0)).label("runs"),
            func.sum(case((Message.status.in_(FAILED_STATUSES), 1), else_=0)).label("failed"),
        )
        .where(Message.conversation_id.in_(conversation_ids))
        .group_by(Message.conversation_id)
        .subquery()
    )
    calls = (
        select(
            Message.conversation_id,
            func.count(ToolInvocation.id).label("calls"),
            func.sum(case((ToolInvocation.is_error, 1), else_=0)).label("errors"),
            func.sum(case((awaiting_response(ToolInvocation), 1), else_=0)).label("missing"),
        )
        .join(Message, Message.id == ToolInvocation.message_id)
        .where(Message.conversation_id.in_(conversation_ids))
        .group_by(Message.conversation_id)
        .subquery()
    )
    usage = (
        select(
            Message.conversation_id,
            func.sum(ServiceCall.input_tokens).label("input_tokens"),
            func.sum(ServiceCall.output_tokens).label("output_tokens"),
            func.sum(ServiceCall.cost_usd).label("cost_usd"),
        )
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.conversation_id.in_(conversation_ids))
        .group_by(Message.conversation_id)
        .subquery()
    )
    rows = db.session.execute(
        select(
            Conversation.id,
            messages.c.messages,
            # A turn starts with a user message; where none was stored (OTLP with content
            # capture off, agents that only log their own runs) each run is a turn.
            case(
                (func.coalesce(messages.c.user_messages, 0) == 0, messages.c.runs),
                else_=messages.c.user_messages,
            ).label("turns"),
            messages.c.failed,
            calls.c.calls,
            calls.c.errors,
            calls.c.missing,
            usage.c.input_tokens,
            usage.c.output_tokens,
            usage.c.cost_usd,
        )
        .outerjoin(messages, messages.c.conversation_id == Conversation.id)
        .outerjoin(calls, calls.c.conversation_id == Conversation.id)
        .outerjoin(usage, usage.c.conversation_id == Conversation.id)
        .where(Conversation.id.in_(conversation_ids))
    )
    found = {
        row.id: ConversationStats(
            messages=as_int(row.messages),
            turns=as_int(row.turns),
            failed_runs=as_int(row.failed),
            calls=as_int(row.calls),
            errors=as_int(row.errors),
            missing_responses=as_int(row.missing),
            input_tokens=as_int(row.input_tokens),
            output_tokens=as_int(row.output_tokens),
            cost_usd=Decimal(row.cost_usd) if row.cost_usd is not None else None,
        )
        for row in rows
    }
    return {cid: found.get(cid, ConversationStats()) for cid in conversation_ids}
