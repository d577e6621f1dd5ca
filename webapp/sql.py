"""SQL building blocks of the reads and the writes: table handles for Core statements, what
differs between SQLite and PostgreSQL (INSERT ... ON CONFLICT, JSON values given as text,
durations, days), and the keyset condition every paged list uses."""

from __future__ import annotations

import re
import secrets
from typing import Any

from sqlalchemy import Float, Integer, Text, and_, cast, func, literal, or_, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.expression import FunctionElement

from .db import JSONType, db
from .models import (
    CALL_FTS,
    PG_SEARCH_COLUMN,
    PG_SEARCH_DOCUMENT,
    Channel,
    Conversation,
    Message,
    ServiceCall,
    ToolDefinition,
    ToolInvocation,
)

TOOL = ToolInvocation.__table__
MESSAGE = Message.__table__
CONVERSATION = Conversation.__table__
SERVICE_CALL = ServiceCall.__table__
CHANNEL = Channel.__table__
TOOL_DEFINITION = ToolDefinition.__table__
PG_SEARCH_TABLE = "tool_invocation"


def new_stamp() -> int:
    """A new ``tool_invocation.stamp`` for the rows one write inserts or changes (a random
    62-bit number: a row's next stamp equals its last with negligible odds)."""
    return secrets.randbits(62)


class json_from_text(FunctionElement[Any]):
    """A JSON column value given as JSON text: serialized once by us, not again by the driver."""

    type = JSONType
    inherit_cache = True
    name = "json_from_text"


@compiles(json_from_text)
def _json_from_text_default(element: json_from_text, compiler: Any, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(json_from_text, "postgresql")
def _json_from_text_pg(element: json_from_text, compiler: Any, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS JSONB)"


def dialect_insert(table: Any, dialect: str | None = None) -> Any:
    """INSERT with the dialect's ON CONFLICT support (the session's dialect by default)."""
    dialect = dialect or db.session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


# --- reads ----------------------------------------------------------------------------------

MS_PER_DAY = 86_400_000.0


def dialect_name() -> str:
    return db.engine.dialect.name


def duration_ms(start: Any, end: Any) -> ColumnElement[float]:
    """Milliseconds from ``start`` to ``end`` (NULL when either is NULL), exact to the
    microsecond on both databases: two calls of the same duration compare equal, so a sort
    breaks their tie by id and a ``min_ms`` filter keeps a call of exactly that duration."""
    if dialect_name() == "sqlite":
        # SQLite keeps timestamps as text, 'YYYY-MM-DD HH:MM:SS.ffffff'. julianday() of the
        # whole text rounds each to the millisecond and subtracts two ~2.46e6-day doubles: a
        # 30,000 ms call came out as 29,999.99997 or 30,000.00003 depending on when it ran.
        # So: whole seconds of the text without its fraction (rounded: the doubles' error is
        # ~1e-5 s), plus the difference of the microsecond digits. ~0.6 µs a row, portable.
        seconds = func.round(
            (func.julianday(func.substr(end, 1, 19)) - func.julianday(func.substr(start, 1, 19)))
            * literal(86_400.0)
        )
        micros = cast(func.substr(end, 21, 6), Integer) - cast(func.substr(start, 21, 6), Integer)
        return seconds * literal(1000.0) + micros / literal(1000.0)
    return cast(func.extract("epoch", end - start), Float) * literal(1000.0)


def after_key(columns: tuple[Any, Any], values: tuple[Any, Any], *, descending: bool):
    """Rows strictly after ``values`` in (columns) order: the keyset paging condition.

    Written with OR/AND rather than row-value comparison so the bound values take the column
    types (UTC timestamps included) on both databases. The redundant bound on the first column
    lets the index walk start at the cursor (the OR alone is only a filter: a deep page of the
    calls explorer sorted by duration took 230 ms at 200k calls on PostgreSQL, 40 ms with it).
    """
    first, second = columns
    v1, v2 = values
    if descending:
        return and_(first <= v1, or_(first < v1, and_(first == v1, second < v2)))
    return and_(first >= v1, or_(first > v1, and_(first == v1, second > v2)))


def as_int(value: Any) -> int:
    """SUM() of no rows is NULL, and PostgreSQL returns Decimal for SUM of integers."""
    return int(value or 0)


def day_of(column: Any) -> ColumnElement[str]:
    """The UTC day of a timestamp column as 'YYYY-MM-DD' text, on both databases."""
    if dialect_name() == "sqlite":
        return func.date(column)  # stored as naive UTC text
    return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")


# Marks a call whose arguments and result the agent's OpenTelemetry instrumentation did not
# record (webapp.ingest.otlp): it has no response, and none is missing.
CONTENT_NOT_CAPTURED = "otlp:content_not_captured"


def awaiting_response(call: Any) -> ColumnElement[bool]:
    """A call (ToolInvocation or its table) without a response yet: calls whose content was not
    captured excepted."""
    return and_(
        call.response.is_(None),
        or_(
            call.redactions.is_(None),
            ~cast(call.redactions, Text).like(f"%{CONTENT_NOT_CAPTURED}%"),
        ),
    )


# --- full-text search of tool calls (the objects are in webapp/models.py) --------------------

_WORD = re.compile(r"[^\W_]+")
MAX_SEARCH_WORDS = 16


def search_words(q: str) -> list[str]:
    """The words of a search as both engines split text: runs of letters and digits (``_``,
    punctuation and spaces separate them), lower-cased, at most MAX_SEARCH_WORDS."""
    return [w.lower() for w in _WORD.findall(q)][:MAX_SEARCH_WORDS]


def call_text_matches(
    table: Any, q: str, *, per_row: bool = False, drive: bool = False
) -> ColumnElement[bool]:
    """Calls whose arguments or result contain every word of ``q`` (whole words, any order,
    case-insensitive). No word at all matches nothing.

    SQLite: the matching ids as a set (read once, then looked up), or with ``per_row`` a check
    of each row as the query walks them (for a word in most calls, where reading every
    match first would cost more than the page). PostgreSQL: with ``drive`` (a selective
    search), the matching ids as a set read first from the index."""
    words = search_words(q)
    if not words:
        return literal(False)
    if dialect_name() == "sqlite":
        query = " ".join(f'"{w}"' for w in words)
        if per_row:
            return text(
                f"EXISTS (SELECT 1 FROM {CALL_FTS} WHERE {CALL_FTS} MATCH :fts_query "
                f"AND {CALL_FTS}.rowid = tool_invocation.id)"
            ).bindparams(fts_query=query)
        fts = text(f"SELECT rowid FROM {CALL_FTS} WHERE {CALL_FTS} MATCH :fts_query")
        return table.c.id.in_(fts.bindparams(fts_query=query).columns(rowid=Integer))
    if drive:
        # The matching ids read from the GIN index first, behind a fence (OFFSET 0: the planner
        # may not pull the subquery up), then looked up by id: its statistics cannot tell a
        # rare word from a common one, and it walked the project's calls in time order checking
        # each, every call of the project for a word in none of them (2.8 s at 1M calls).
        return text(
            f"{PG_SEARCH_TABLE}.id IN (SELECT search_match.id FROM (SELECT id FROM "
            f"{PG_SEARCH_TABLE} WHERE {PG_SEARCH_COLUMN} @@ plainto_tsquery('simple'::regconfig, "
            ":ts_query) OFFSET 0) AS search_match)"
        ).bindparams(ts_query=" ".join(words))
    return text(
        f"{PG_SEARCH_DOCUMENT} @@ plainto_tsquery('simple'::regconfig, :ts_query)"
    ).bindparams(ts_query=" ".join(words))


def fts_match_ids(q: str) -> Any:
    """SQLite: the ids of the calls matching ``q`` as the search index yields them, a subquery
    for FROM (``id``), so that a query can start from the matches and stop at its LIMIT (as
    ``IN (...)`` SQLite reads every match into a temporary set first). None without a word."""
    words = search_words(q)
    if not words:
        return None
    query = " ".join(f'"{w}"' for w in words)
    return (
        text(f"SELECT rowid AS id FROM {CALL_FTS} WHERE {CALL_FTS} MATCH :fts_query")
        .bindparams(fts_query=query)
        .columns(id=Integer)
        .subquery("search_match")
    )


def search_match_count(q: str, cap: int) -> int | None:
    """How many calls of any project match ``q``, counted up to ``cap + 1`` (one query, a few
    ms, from the search index): whether a search is selective enough to drive the query from
    the index (neither planner can tell from its statistics)."""
    words = search_words(q)
    if not words:
        return None
    if dialect_name() != "sqlite":
        return db.session.execute(
            text(
                f"SELECT count(*) FROM (SELECT 1 FROM {PG_SEARCH_TABLE} WHERE "
                f"{PG_SEARCH_COLUMN} @@ plainto_tsquery('simple'::regconfig, :ts_query) "
                "LIMIT :cap) AS found"
            ),
            {"ts_query": " ".join(words), "cap": cap + 1},
        ).scalar_one()
    query = " ".join(f'"{w}"' for w in words)
    return db.session.execute(
        text(
            f"SELECT count(*) FROM (SELECT rowid FROM {CALL_FTS} "
            f"WHERE {CALL_FTS} MATCH :fts_query LIMIT :cap)"
        ),
        {"fts_query": query, "cap": cap + 1},
    ).scalar_one()


def older_than(column: Any, now: Any, seconds: Any) -> ColumnElement[bool]:
    """``column`` lies more than ``seconds`` (an SQL expression) before ``now``."""
    if dialect_name() == "sqlite":
        return func.julianday(column) < func.julianday(now) - cast(seconds, Float) / literal(
            86_400.0
        )
    return column < now - func.make_interval(0, 0, 0, 0, 0, 0, seconds)
