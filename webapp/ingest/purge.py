"""`toolscope purge`: conversations idle for longer than the cut-off (their messages, calls,
usage and OTLP turns go by the foreign keys' cascades, their raw spans with them), placeholder
messages that never got a conversation, and unattached raw OTLP rows older than the cut-off.

In bounded batches, each its own short write transaction (`transaction.run_write`), so the
server keeps taking writes: on SQLite the write lock is released between batches and writers
waiting within their busy timeout get in, on PostgreSQL the row locks of a batch are held only
while it runs. A batch is at most `batch` rows of the table it deletes from, and shrinks when
one takes longer than `BATCH_SECONDS` (a conversation carries all its calls): a pause after
each batch, as long as half of it and at least `MIN_PAUSE_SECONDS`, leaves writers the lock
(SQLite's busy handler polls every 100 ms at most). A purge stopped half-way leaves whole
conversations, and running it again finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, exists, select

from ..db import db
from ..errors import ApiError
from ..sql import CONVERSATION, MESSAGE
from . import rollups
from .otlp.retention import LOG, SPAN, TURN_TRACE, delete_bare_links, delete_raw_of
from .transaction import Write, run_write

BATCH_SECONDS = 0.25
# The first batch of each table: it grows (doubling) while batches stay short.
FIRST_BATCH = 32
MIN_PAUSE_SECONDS = 0.12
WRITE_ATTEMPTS = 8


@dataclass
class PurgeCounts:
    conversations: int = 0
    orphan_messages: int = 0
    spans: int = 0
    logs: int = 0
    batches: int = 0


def purge(
    cutoff: datetime,
    project_ids: list[int] | None,
    *,
    batch: int = 500,
    progress: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PurgeCounts:
    """Delete what `toolscope purge` deletes, `batch` rows at most per write transaction.
    `project_ids`: only those projects (None: all)."""
    counts = PurgeCounts()
    steps: list[tuple[str, Callable[..., tuple[int, int, int, int, int]]]] = [
        ("conversations", _conversations),
        ("orphan messages", _orphans),
        ("unattached OTLP spans", _unattached(SPAN)),
        ("unattached OTLP log records", _unattached(LOG)),
    ]
    for label, step in steps:
        size, after, done = min(batch, FIRST_BATCH), 0, 0
        while True:
            started = time.monotonic()
            selected, removed, spans, logs, after = _with_retries(
                Write(step, (cutoff, project_ids, after, size))
            )
            took = time.monotonic() - started
            counts.batches += 1
            counts.spans += spans
            counts.logs += logs
            done += removed
            if label == "conversations":
                counts.conversations += removed
            elif label == "orphan messages":
                counts.orphan_messages += removed
            elif label.endswith("spans"):
                counts.spans += removed
            else:
                counts.logs += removed
            if selected < size:
                break
            if progress is not None:
                progress(f"purge: {done} {label} deleted ({took * 1000:.0f} ms for {removed})")
            # Adapt the batch to the time it takes: shorter than BATCH_SECONDS keeps the lock
            # short, never more than asked for.
            if took > BATCH_SECONDS and size > 1:
                size = max(1, size // 2)
            elif took < BATCH_SECONDS / 4:
                size = min(batch, size * 2)
            sleep(max(MIN_PAUSE_SECONDS, took / 2))
    _with_retries(Write(_links, ()))
    return counts


def _with_retries(write: Write[Any]) -> Any:
    """A busy database (a writer holding the lock past the busy timeout) is tried again."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return run_write(write)
        except ApiError as exc:
            if exc.status != 503 or attempt == WRITE_ATTEMPTS:
                raise
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def _conversations(
    cutoff: datetime, project_ids: list[int] | None, after: int, size: int
) -> tuple[int, int, int, int, int]:
    """The next `size` idle conversations by id, locked FOR UPDATE on PostgreSQL first, as a
    single delete does (`ingest.deletes`): a writer appending to one holds it FOR KEY SHARE, and
    its update makes it no longer idle (the lock re-checks the condition)."""
    selected = (
        select(CONVERSATION.c.id)
        .where(CONVERSATION.c.updated_at < cutoff, CONVERSATION.c.id > after)
        .order_by(CONVERSATION.c.id)
        .limit(size)
    )
    if project_ids is not None:
        selected = selected.where(CONVERSATION.c.project_id.in_(project_ids))
    ids = list(db.session.scalars(selected.with_for_update()))
    if not ids:
        return 0, 0, 0, 0, after
    chosen = select(CONVERSATION.c.id).where(CONVERSATION.c.id.in_(ids))
    spans, logs = delete_raw_of(chosen)
    rollups.remove_conversations(ids)
    removed = db.session.execute(delete(CONVERSATION).where(CONVERSATION.c.id.in_(ids))).rowcount
    return len(ids), removed, spans, logs, ids[-1]


def _orphans(
    cutoff: datetime, project_ids: list[int] | None, after: int, size: int
) -> tuple[int, int, int, int, int]:
    """Placeholder messages (made by the MessageTool API) that never got a conversation."""
    selected = (
        select(MESSAGE.c.id)
        .where(
            MESSAGE.c.conversation_id.is_(None),
            MESSAGE.c.created_at < cutoff,
            MESSAGE.c.id > after,
        )
        .order_by(MESSAGE.c.id)
        .limit(size)
    )
    if project_ids is not None:
        selected = selected.where(MESSAGE.c.project_id.in_(project_ids))
    # Locked (PostgreSQL), so that none is given a conversation between the roll-ups' read of
    # its calls and the delete.
    ids = list(db.session.scalars(selected.with_for_update()))
    if not ids:
        return 0, 0, 0, 0, after
    rollups.remove_messages(ids)
    removed = db.session.execute(
        delete(MESSAGE).where(MESSAGE.c.id.in_(ids), MESSAGE.c.conversation_id.is_(None))
    ).rowcount
    return len(ids), removed, 0, 0, ids[-1]


def _unattached(table: Any) -> Callable[..., tuple[int, int, int, int, int]]:
    def step(
        cutoff: datetime, project_ids: list[int] | None, after: int, size: int
    ) -> tuple[int, int, int, int, int]:
        """Raw rows received before the cut-off of traces that made no turn."""
        selected = (
            select(table.c.id)
            .where(
                table.c.received_at < cutoff,
                table.c.id > after,
                ~exists(
                    select(TURN_TRACE.c.trace_id).where(
                        TURN_TRACE.c.project_id == table.c.project_id,
                        TURN_TRACE.c.trace_id == table.c.trace_id,
                    )
                ),
            )
            .order_by(table.c.id)
            .limit(size)
        )
        if project_ids is not None:
            selected = selected.where(table.c.project_id.in_(project_ids))
        ids = list(db.session.scalars(selected))
        if not ids:
            return 0, 0, 0, 0, after
        removed = db.session.execute(delete(table).where(table.c.id.in_(ids))).rowcount
        return len(ids), removed, 0, 0, ids[-1]

    step.__qualname__ = f"unattached_{table.name}"
    return step


def _links() -> None:
    delete_bare_links()
