"""Small SQL building blocks that differ between SQLite and PostgreSQL, or that every list
needs (keyset conditions)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Float, and_, cast, func, literal, or_
from sqlalchemy.sql.elements import ColumnElement

from ..db import db

MS_PER_DAY = 86_400_000.0


def dialect_name() -> str:
    return db.engine.dialect.name


def duration_ms(start: Any, end: Any) -> ColumnElement[float]:
    """Milliseconds from ``start`` to ``end`` (NULL when either is NULL)."""
    if dialect_name() == "sqlite":
        # SQLite keeps timestamps as text; julianday() parses them (resolution ~50 µs).
        return (func.julianday(end) - func.julianday(start)) * literal(MS_PER_DAY)
    return cast(func.extract("epoch", end - start), Float) * literal(1000.0)


def after_key(columns: tuple[Any, Any], values: tuple[Any, Any], *, descending: bool):
    """Rows strictly after ``values`` in (columns) order: the keyset paging condition.

    Written with OR/AND rather than row-value comparison so the bound values take the column
    types (UTC timestamps included) on both databases.
    """
    first, second = columns
    v1, v2 = values
    if descending:
        return or_(first < v1, and_(first == v1, second < v2))
    return or_(first > v1, and_(first == v1, second > v2))


def as_int(value: Any) -> int:
    """SUM() of no rows is NULL, and PostgreSQL returns Decimal for SUM of integers."""
    return int(value or 0)
