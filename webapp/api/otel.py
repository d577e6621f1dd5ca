"""`GET /api/v1/otel/stats`: what OTLP ingestion received for the project and what became of
it, so a user whose agent shows nothing can see why (docs/otlp.md)."""

from __future__ import annotations

from datetime import datetime

from flask import g, jsonify
from flask_openapi3 import Tag
from pydantic import BaseModel
from sqlalchemy import case, exists, func, select

from ..db import db
from ..models import OtelLog, OtelSpan, OtelTurn, OtelTurnTrace
from . import bp
from .endpoint import endpoint
from .schemas import ErrorOut

TAG = Tag(name="OpenTelemetry", description="OTLP ingestion (POST /v1/traces, /v1/logs).")
SPAN = OtelSpan.__table__
LOG = OtelLog.__table__
TURN = OtelTurn.__table__
TURN_TRACE = OtelTurnTrace.__table__


class OtelStats(BaseModel):
    spans_received: int
    # Classified as an LLM call, a tool execution or an agent run (the rest is kept, unused).
    spans_understood: int
    # Spans of traces that made no turn: nothing on the dashboard comes from them.
    spans_unattached: int
    spans_by_class: dict[str, int]
    log_records_received: int
    turns: int
    turns_without_content: int
    last_received_at: datetime | None


def stats(project_id: int) -> dict:
    """Three queries, whatever the amount of data."""
    attached = exists(
        select(TURN_TRACE.c.turn_id).where(
            TURN_TRACE.c.project_id == SPAN.c.project_id,
            TURN_TRACE.c.trace_id == SPAN.c.trace_id,
        )
    )
    rows = db.session.execute(
        select(
            SPAN.c.span_class,
            func.count(),
            func.sum(case((attached, 0), else_=1)),
            func.max(SPAN.c.received_at),
        )
        .where(SPAN.c.project_id == project_id)
        .group_by(SPAN.c.span_class)
    ).all()
    logs = db.session.execute(
        select(func.count(), func.max(LOG.c.received_at)).where(LOG.c.project_id == project_id)
    ).one()
    turns = db.session.execute(
        select(func.count(), func.sum(case((TURN.c.content_captured, 0), else_=1))).where(
            TURN.c.project_id == project_id
        )
    ).one()
    by_class = {r[0]: r[1] for r in rows}
    last = [t for t in [*(r[3] for r in rows), logs[1]] if t is not None]
    return {
        "spans_received": sum(by_class.values()),
        "spans_understood": sum(n for c, n in by_class.items() if c != "other"),
        "spans_unattached": sum(int(r[2] or 0) for r in rows),
        "spans_by_class": by_class,
        "log_records_received": logs[0],
        "turns": turns[0],
        "turns_without_content": int(turns[1] or 0),
        "last_received_at": max(last).isoformat() if last else None,
    }


@bp.get(
    "/otel/stats",
    tags=[TAG],
    summary="What OTLP ingestion received and understood",
    responses={200: OtelStats, 401: ErrorOut},
)
@endpoint()
def otel_stats():
    """Spans received, understood (LLM, tool and agent spans) and unattached (in traces
    that made no turn), log records, and turns (with and without captured content)."""
    return jsonify(stats(g.project.id))
