"""The reference figure: how fast the same database takes tool_invocation rows without HTTP.

Three ways, from what the API can hope for down to the database's own ceiling:

* SQLAlchemy Core `executemany`, 50 rows per transaction: one API request's worth of rows, with
  the column types doing their work (JSON encoding, UTC timestamps) as they do in the app;
* the same with 5,000 rows per transaction: what batching across requests would buy;
* the DB-API driver's `executemany` of pre-encoded rows, 5,000 per transaction: the database and
  driver alone, without SQLAlchemy's per-row parameter processing.

Rows go into the scratch database of the run, under one message of the bench project, through
the app's own engine (same pragmas, same `BEGIN IMMEDIATE` on SQLite).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert

from .load import CALLS_PER_REQUEST
from .sections import BenchContext, Figure, section
from .server import BENCH_PROJECT

# A reference, not the subject: a few seconds per mode are enough.
MAX_SECONDS_PER_MODE = 3.0
MAX_ROWS_PER_MODE = 1_000_000
# Unique key (message, round, sequence): rows of a batch take 100 sequence slots per round.
SLOTS_PER_ROUND = 100


@dataclass(frozen=True)
class Mode:
    via: str  # "core" or "driver"
    rows_per_transaction: int

    @property
    def label(self) -> str:
        how = "SQLAlchemy Core executemany" if self.via == "core" else "DB-API executemany"
        return f"raw insert, {how}, {self.rows_per_transaction:,} rows/transaction"


MODES = (Mode("core", CALLS_PER_REQUEST), Mode("core", 5_000), Mode("driver", 5_000))


@section(
    "raw-insert",
    "tool_invocation rows inserted straight into the same database (the comparison figure)",
    needs_database=True,
)
def raw_insert_section(ctx: BenchContext) -> list[Figure]:
    assert ctx.database_url is not None
    from .. import create_app
    from ..db import db

    app = create_app({"DATABASE_URL": ctx.database_url, "SECRET_KEY": "bench"})
    figures = []
    with app.app_context():
        try:
            template = _row_template(*_scratch_message(db, ctx.run_id))
            inserter = _Inserter(db.engine, template)
            seconds = min(ctx.seconds, MAX_SECONDS_PER_MODE)
            for mode in MODES:
                ctx.say(f"  {mode.label} ...")
                rows, elapsed = inserter.run(mode, seconds)
                rate = rows / elapsed if elapsed else 0.0
                values = {"rows_per_second": round(rate, 1), "rows": rows}
                text = f"{rate:>9,.0f} rows/s   ({rows:,} rows in {elapsed:.1f} s)"
                figures.append(Figure("raw-insert", ctx.target, mode.label, values, text))
        finally:
            db.session.remove()
            db.engine.dispose()
    return figures


def _scratch_message(db: Any, run_id: str) -> tuple[int, int]:
    """A message of the bench project for the rows to hang off (foreign keys hold)."""
    from ..auth import get_or_create_project
    from ..db import begin_write, utcnow
    from ..models import Message

    # The write lock up front: a transaction that reads and then writes fails at once on SQLite
    # if another writer (the servers' token pass) holds the lock meanwhile; this one waits.
    begin_write()
    project = get_or_create_project(BENCH_PROJECT)
    message = Message(
        project_id=project.id, external_id=f"{run_id}-raw", role="assistant", created_at=utcnow()
    )
    db.session.add(message)
    db.session.commit()
    return project.id, message.id


def _row_template(project_id: int, message_id: int) -> dict[str, Any]:
    """A row like the load generator's calls: a search with a ~400-byte JSON result."""
    from ..db import utcnow

    result = json.dumps(
        [{"source_number": n, "title": "Quarterly report", "snippet": "x" * 150} for n in (1, 2)]
    )
    now = utcnow()
    return {
        "project_id": project_id,
        "message_id": message_id,
        "external_tool_call_id": "call_raw",
        "function_name": "internal_search",
        "arguments": {"query": "quarterly revenue", "limit": 5},
        "created_at": now,
        "response": result,
        "response_created_at": now,
        "is_error": False,
        "arguments_tokens": 12,
        "response_tokens": 90,
        "token_method": "raw-insert",
        "response_bytes": len(result),
        # As every write of the app gives one (without it, SQLite's stamp trigger would write
        # each row twice and the reference figure would be slower than the driver is).
        "stamp": 1,
    }


class _Inserter:
    def __init__(self, engine: Any, template: dict[str, Any]):
        from ..models import ToolInvocation

        self.engine = engine
        self.template = template
        self.table = ToolInvocation.__table__
        self.next_round = 0

    def run(self, mode: Mode, seconds: float) -> tuple[int, float]:
        """Insert batches until `seconds` pass; returns (rows, elapsed seconds)."""
        insert_batch = self._core if mode.via == "core" else self._driver()
        rows = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline and rows < MAX_ROWS_PER_MODE:
            insert_batch(self._keys(mode.rows_per_transaction))
            rows += mode.rows_per_transaction
        return rows, time.perf_counter() - started

    def _keys(self, count: int) -> list[tuple[int, int]]:
        first = self.next_round
        self.next_round += -(-count // SLOTS_PER_ROUND)
        return [(first + n // SLOTS_PER_ROUND, n % SLOTS_PER_ROUND) for n in range(count)]

    def _core(self, keys: list[tuple[int, int]]) -> None:
        rows = [{**self.template, "round_index": r, "sequence_index": s} for r, s in keys]
        with self.engine.connect() as conn:
            conn = conn.execution_options(toolscope_write=True)
            with conn.begin():
                conn.execute(insert(self.table), rows)

    def _driver(self):
        """A batch inserter on the bare DB-API connection, values encoded once up front."""
        dialect = self.engine.dialect
        columns = [*self.template, "round_index", "sequence_index"]
        compiled = insert(self.table).compile(dialect=dialect, column_keys=columns)
        sql = str(compiled)
        encoded = {k: _encode(v, dialect.name) for k, v in self.template.items()}
        positional = compiled.positiontup  # None for named paramstyles (psycopg)

        def insert_batch(keys: list[tuple[int, int]]) -> None:
            rows = [{**encoded, "round_index": r, "sequence_index": s} for r, s in keys]
            params: list[Any] = rows
            if positional:
                params = [tuple(row[name] for name in positional) for row in rows]
            raw = self.engine.raw_connection()
            try:
                cursor = raw.cursor()
                if dialect.name == "sqlite":
                    cursor.execute("BEGIN IMMEDIATE")
                cursor.executemany(sql, params)
                raw.commit()
            finally:
                raw.close()

        return insert_batch


def _encode(value: Any, dialect_name: str) -> Any:
    """What SQLAlchemy's column types would send to the driver, computed once."""
    if isinstance(value, dict | list):
        return json.dumps(value)
    if isinstance(value, datetime) and dialect_name == "sqlite":
        # SQLAlchemy's SQLite storage format for DateTime, naive UTC (see webapp.db.UTCDateTime).
        return value.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value
