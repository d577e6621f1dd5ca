"""Retention of raw OTLP rows (`toolscope purge`): the spans and log records of purged
conversations go with them, and so do unattached ones (traces that made no turn: HTTP or
database spans, embeddings, or GenAI spans of an agent that never finished a call) older than
the cut-off, in batches (`webapp.ingest.purge`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, delete, exists, select

from ...db import db
from ...models import OtelLink, OtelLog, OtelSpan, OtelTurn, OtelTurnTrace

SPAN = OtelSpan.__table__
LOG = OtelLog.__table__
LINK = OtelLink.__table__
TURN = OtelTurn.__table__
TURN_TRACE = OtelTurnTrace.__table__


def _delete_traces(table: Any, traces: Any) -> int:
    return db.session.execute(
        delete(table).where(
            exists(
                traces.where(
                    and_(
                        traces.selected_columns.project_id == table.c.project_id,
                        traces.selected_columns.trace_id == table.c.trace_id,
                    )
                )
            )
        )
    ).rowcount


def delete_raw_of(conversation_ids: Any) -> tuple[int, int]:
    """Delete the raw spans, log records and links of the traces projected into the
    conversations selected by `conversation_ids` (a SELECT of ids, run before the conversations
    are deleted); a trace that also feeds a conversation that stays is kept. Returns (spans,
    log records) deleted. Does not commit."""
    purged_turns = select(TURN.c.id).where(TURN.c.conversation_id.in_(conversation_ids))
    kept = TURN_TRACE.alias("kept")
    traces = select(TURN_TRACE.c.project_id, TURN_TRACE.c.trace_id).where(
        TURN_TRACE.c.turn_id.in_(purged_turns),
        # A trace that also feeds a turn of a conversation that stays is kept.
        ~exists(
            select(kept.c.turn_id).where(
                kept.c.project_id == TURN_TRACE.c.project_id,
                kept.c.trace_id == TURN_TRACE.c.trace_id,
                kept.c.turn_id.not_in(purged_turns),
            )
        ),
    )
    spans = logs = 0
    for table in (SPAN, LOG, LINK):
        count = _delete_traces(table, traces)
        spans += count if table is SPAN else 0
        logs += count if table is LOG else 0
    return spans, logs


def delete_bare_links() -> None:
    """Links of traces that have no rows left."""
    db.session.execute(
        delete(LINK).where(
            ~exists(
                select(SPAN.c.id).where(
                    SPAN.c.project_id == LINK.c.project_id, SPAN.c.trace_id == LINK.c.trace_id
                )
            ),
            ~exists(
                select(LOG.c.id).where(
                    LOG.c.project_id == LINK.c.project_id, LOG.c.trace_id == LINK.c.trace_id
                )
            ),
        )
    )
