"""Inserts sent as driver SQL, their values bound before the write lock.

The OTLP store writes an export's rows (hundreds of spans, messages, calls) while SQLite's one
write lock is held, so what runs inside the lock is what caps ingestion. Through the session,
SQLAlchemy compiled each statement and processed every parameter of every row there (a third
of the write step's CPU in the 2026-11-28 profile). Here a table's INSERT is planned once per
dialect (`Insert`), each row's values are converted by the columns' own bind processors before
the lock (`bound`), and inside it `send` only hands them to the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from itertools import chain
from typing import Any

from sqlalchemy import JSON, Numeric

from ..db import db
from .errors import RaceLost
from .values import compact_json

__all__ = ["Insert", "bound", "send", "send_new"]


@dataclass(frozen=True)
class Insert:
    """An INSERT ... ON CONFLICT DO NOTHING of `columns` sent as driver SQL, its values given
    in their bound form. The rows are converted by each column's own bind processor before the
    write lock (`bound`); inside it, `send` only hands them to the driver. Through the session,
    SQLAlchemy compiled the statement and processed every parameter of every row while the
    lock was held (a third of the write step's CPU, the 2026-11-28 profile).

    SQLite: an executemany of the one-row statement (sqlite3 steps it in C), or, when rows are
    returned, multi-row VALUES. PostgreSQL: the rows as one JSON parameter,
    `INSERT ... SELECT FROM jsonb_to_recordset(...)`, as `ingest.calls` does (psycopg parses
    a long statement again on every execution). Columns in `json_text` are given as JSON text."""

    table: Any
    columns: tuple[str, ...]
    json_text: tuple[str, ...] = ()
    returning: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Plan:
    single: str  # the one-row statement (SQLite executemany)
    head: str  # multi-row VALUES: head + rows + tail
    row: str
    tail: str
    converters: tuple[tuple[int, Any], ...]
    recordset: str | None  # PostgreSQL

    def statement(self, rows: int) -> str:
        return self.head + ", ".join([self.row] * rows) + self.tail


_ROWS_PER_STATEMENT = 500  # at most 32,766 parameters a statement (SQLite)


_PLANS: dict[tuple[Insert, str], _Plan] = {}


def _plan(insert: Insert, dialect: Any) -> _Plan:
    plan = _PLANS.get((insert, dialect.name))
    if plan is None:
        plan = _PLANS[(insert, dialect.name)] = _make_plan(insert, dialect)
    return plan


def _make_plan(insert: Insert, dialect: Any) -> _Plan:
    table, columns = insert.table, insert.columns
    pg = dialect.name == "postgresql"
    # PostgreSQL: every JSON value goes as text, cast (a value of another JSON column is
    # serialized here); SQLite: the column's own processor serializes it, as the session did.
    cast = {c for c in columns if c in insert.json_text or (pg and _is_json(table.c[c]))}
    mark = "%s" if pg else "?"
    marks = ", ".join(f"CAST({mark} AS JSONB)" if pg and c in cast else mark for c in columns)
    processors = [
        None
        if c in insert.json_text
        else compact_json
        if c in cast
        else table.c[c].type.dialect_impl(dialect).bind_processor(dialect)
        for c in columns
    ]
    if pg:
        processors = [
            p
            if c in cast
            else _then_iso(p)
            if p is not None
            else _decimal_text
            if isinstance(table.c[c].type, Numeric)
            else None
            for p, c in zip(processors, columns, strict=True)
        ]
    converters = tuple((i, p) for i, p in enumerate(processors) if p is not None)
    names = ", ".join(columns)
    tail = " ON CONFLICT DO NOTHING"
    if insert.returning:
        tail += " RETURNING " + ", ".join(insert.returning)
    recordset = None
    if pg:
        types = ["TEXT" if c in cast else table.c[c].type.compile(dialect) for c in columns]
        selected = [f"CAST(t.{c} AS JSONB)" if c in cast else f"t.{c}" for c in columns]
        record = ", ".join(f"{c} {t}" for c, t in zip(columns, types, strict=True))
        recordset = (
            f"INSERT INTO {table.name} ({names}) SELECT {', '.join(selected)} "
            f"FROM jsonb_to_recordset(CAST(%s AS JSONB)) AS t({record}){tail}"
        )
    head = f"INSERT INTO {table.name} ({names}) VALUES "
    return _Plan(
        single=f"{head}({marks}){tail}",
        head=head,
        row=f"({marks})",
        tail=tail,
        converters=converters,
        recordset=recordset,
    )


def _is_json(column: Any) -> bool:
    return isinstance(column.type, JSON)


def _then_iso(processor: Any) -> Any:
    """The processor, then ISO 8601 text for a timestamp (the JSON recordset's form)."""

    def convert(value: Any) -> Any:
        value = processor(value)
        return value.isoformat() if isinstance(value, datetime) else value

    return convert


def _decimal_text(value: Any) -> Any:
    """A Decimal as its text (exact), for the JSON recordset."""
    return str(value) if isinstance(value, Decimal) else value


_MISSING = object()


def bound(insert: Insert, rows: list[list[Any]]) -> list[list[Any]]:
    """`rows` (values in `insert.columns` order) converted in place for the driver, each
    distinct value of a column once (an export's rows share their times)."""
    dialect = db.session.get_bind().dialect
    for index, convert in _plan(insert, dialect).converters:
        memo: dict[Any, Any] = {}
        for row in rows:
            value = row[index]
            if value is None:
                continue
            if isinstance(value, dict | list):  # JSON, not a key
                row[index] = convert(value)
                continue
            converted = memo.get(value, _MISSING)
            if converted is _MISSING:
                converted = memo[value] = convert(value)
            row[index] = converted
    return rows


def send(insert: Insert, rows: list[list[Any]]) -> Any:
    """Insert bound `rows`: the returned rows when `insert.returning`, else how many were
    inserted (conflicting rows are not)."""
    conn = db.session.connection()
    plan = _plan(insert, conn.dialect)
    if plan.recordset is not None:
        document = compact_json([dict(zip(insert.columns, row, strict=True)) for row in rows])
        result = conn.exec_driver_sql(plan.recordset, (document,))
        return result.all() if insert.returning else result.rowcount
    if not insert.returning:
        return conn.exec_driver_sql(plan.single, [tuple(row) for row in rows]).rowcount
    returned: list[Any] = []
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        chunk = rows[start : start + _ROWS_PER_STATEMENT]
        values = tuple(chain.from_iterable(chunk))
        returned += conn.exec_driver_sql(plan.statement(len(chunk)), values).all()
    return returned


def send_new(insert: Insert, rows: list[list[Any]]) -> Any:
    """`send` of rows that must all be new, or a concurrent writer got there first and the
    request runs again (`RaceLost`)."""
    sent = send(insert, rows)
    if (len(sent) if insert.returning else sent) != len(rows):
        raise RaceLost()
    return sent
