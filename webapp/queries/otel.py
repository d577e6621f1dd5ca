"""Reads of OTLP data for the dashboard: where a conversation's rows came from, and the spans
behind it (the trace view). A constant number of queries whatever the amount of data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, func, select

from ..db import db
from ..models import OtelSpan, OtelTurn, OtelTurnTrace

SPAN = OtelSpan.__table__
TURN = OtelTurn.__table__
TURN_TRACE = OtelTurnTrace.__table__

# The trace view shows at most this many spans (the earliest ones) of a conversation.
MAX_TRACE_SPANS = 500


@dataclass(frozen=True, slots=True)
class ConversationOtel:
    """What the conversation page says about OTLP: turns it holds, and whether content was
    captured in all of them."""

    turns: int
    turns_without_content: int


def conversation_otel(conversation_id: int) -> ConversationOtel:
    """One query."""
    row = db.session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(case((TURN.c.content_captured, 0), else_=1)), 0),
        ).where(TURN.c.conversation_id == conversation_id)
    ).one()
    return ConversationOtel(int(row[0]), int(row[1]))


def conversation_traces_query(conversation_id: int) -> Any:
    return (
        select(TURN_TRACE.c.trace_id)
        .join(TURN, TURN.c.id == TURN_TRACE.c.turn_id)
        .where(TURN.c.conversation_id == conversation_id)
    )


def conversation_spans(project_id: int, conversation_id: int) -> tuple[list[dict], int]:
    """The spans of the conversation's traces, earliest first (at most MAX_TRACE_SPANS), and
    how many there are in all. Two queries."""
    traces = conversation_traces_query(conversation_id)
    where = (SPAN.c.project_id == project_id, SPAN.c.trace_id.in_(traces))
    total = db.session.execute(select(func.count()).where(*where)).scalar_one()
    rows = db.session.execute(
        select(
            SPAN.c.trace_id,
            SPAN.c.span_id,
            SPAN.c.parent_span_id,
            SPAN.c.name,
            SPAN.c.kind,
            SPAN.c.span_class,
            SPAN.c.start_ns,
            SPAN.c.end_ns,
            SPAN.c.status_code,
            SPAN.c.status_message,
            SPAN.c.service_name,
            SPAN.c.scope_name,
            SPAN.c.attributes,
        )
        .where(*where)
        .order_by(SPAN.c.start_ns, SPAN.c.span_id)
        .limit(MAX_TRACE_SPANS)
    ).mappings()
    return [dict(r) for r in rows], total


def conversation_span(
    project_id: int, conversation_id: int, trace_id: str, span_id: str
) -> dict[str, Any] | None:
    """One span of the conversation's traces, with its raw part; None when it is not one of
    them. One query."""
    row = (
        db.session.execute(
            select(
                SPAN.c.trace_id,
                SPAN.c.span_id,
                SPAN.c.parent_span_id,
                SPAN.c.name,
                SPAN.c.span_class,
                SPAN.c.status_message,
                SPAN.c.service_name,
                SPAN.c.scope_name,
                SPAN.c.resource,
                SPAN.c.attributes,
                SPAN.c.events,
                SPAN.c.links,
            ).where(
                SPAN.c.project_id == project_id,
                SPAN.c.trace_id == trace_id,
                SPAN.c.span_id == span_id,
                SPAN.c.trace_id.in_(conversation_traces_query(conversation_id)),
            )
        )
        .mappings()
        .first()
    )
    return dict(row) if row is not None else None


def llm_scope_names(project_id: int, conversation_id: int, limit: int = 5) -> list[str]:
    """Instrumentation scopes of the conversation's LLM spans (names the content hint's
    family). One query."""
    return list(
        db.session.scalars(
            select(SPAN.c.scope_name)
            .where(
                SPAN.c.project_id == project_id,
                SPAN.c.trace_id.in_(conversation_traces_query(conversation_id)),
                SPAN.c.span_class == "llm",
            )
            .distinct()
            .order_by(SPAN.c.scope_name)
            .limit(limit)
        )
    )
