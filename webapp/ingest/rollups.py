"""Keeping the roll-ups (``tool_rollup``, ``model_rollup``) in step with the rows they sum.

Every write path says what it changes as it changes it, from the rows it writes or is about to
delete: the native calls and responses (``ingest.calls.store_calls``), usage
(``ingest.usage.store_usage``), the OTLP projector's inserts, rewrites and deletes of the turns
it owns, the token pass's counts, a conversation's delete, purge and the demo's reload. Those
deltas (what each row adds, ``webapp.analytics.rollups``) are summed per bucket in the
session while the write runs, and written just before its commit (a ``before_commit``
listener, so no path that commits can leave them behind; a rollback drops them): per table,
one SELECT of the touched rows (``FOR UPDATE`` on PostgreSQL, in key order), one INSERT of
the new ones and one UPDATE of the others, whatever the number of calls. The rows stay locked
for the commit only.

Deltas, not recomputation: a bucket of a busy tool holds an hour's calls, which a write of 25
calls must not read again. What a delta cannot say exactly is read back from the rows: a bucket's
newest call after a call of it was taken away. :func:`rebuild` recomputes everything from the
rows (the migration's backfill, the bench's bulk loader).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, event, func, select, update
from sqlalchemy.orm import Session

from ..analytics.rollups import (
    DAY,
    HOUR,
    SPANS,
    CallPart,
    UsagePart,
    add_row,
    bucket_start,
    call_part,
    model_key,
    usage_part,
    usage_time,
)
from ..db import db
from ..models import ModelRollup, ToolRollup
from ..sql import MESSAGE, SERVICE_CALL, TOOL
from . import tool_cost_rollup  # noqa: F401 (its listener: conversation deletes)

TOOL_ROLLUP = ToolRollup.__table__
MODEL_ROLLUP = ModelRollup.__table__
_INFO_KEY = "toolscope_rollups"
_CHUNK = 400

ToolKey = tuple[int, int, datetime, str]  # project, span, bucket, function name
ModelKey = tuple[int, int, datetime, str]  # project, span, bucket, model ('' for none)


@dataclass
class Pending:
    # By hour only: each hour's delta is added to its day's when written.
    tools: dict[ToolKey, CallPart] = field(default_factory=dict)
    models: dict[ModelKey, UsagePart] = field(default_factory=dict)


def _pending() -> Pending:
    info = db.session.info
    pending = info.get(_INFO_KEY)
    if pending is None:
        pending = info[_INFO_KEY] = Pending()
    return pending


# --- what the write paths say ----------------------------------------------------------------


def _hour(tools: dict[ToolKey, CallPart], project_id: int, name: str, at: datetime) -> CallPart:
    key = (project_id, HOUR, bucket_start(at, HOUR), name)
    part = tools.get(key)
    if part is None:
        tools[key] = part = CallPart()
    return part


def add_call_part(project_id: int, function_name: str, part: CallPart, sign: int = 1) -> None:
    assert part.last_at is not None
    _hour(_pending().tools, project_id, function_name, part.last_at).merge(part, sign)


def add_calls(project_id: int, rows: Iterable[Mapping[str, Any]], sign: int = 1) -> None:
    """Calls inserted (sign 1) or deleted (-1): rows with the columns of
    ``analytics.rollups.CALL_COLUMNS`` (the project apart)."""
    tools = _pending().tools
    for row in rows:
        add_row(_hour(tools, project_id, row["function_name"], row["created_at"]), row, sign=sign)


def change_call(project_id: int, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """A stored call rewritten in place (a response arriving after its call)."""
    if old["function_name"] != new["function_name"] or old["created_at"] != new["created_at"]:
        add_call_part(project_id, old["function_name"], call_part(old), -1)
        add_call_part(project_id, new["function_name"], call_part(new), 1)
        return
    delta = call_part(new)
    delta.merge(call_part(old), -1)
    delta.removed = False  # the same call, at the same moment: the bucket's newest stays
    add_call_part(project_id, new["function_name"], delta)


def add_usage(project_id: int, rows: Iterable[Mapping[str, Any]], sign: int = 1) -> None:
    """Service calls of messages in a conversation, inserted (1) or deleted (-1): rows with
    model, created_at (or message_created_at), the token counts and cost_usd."""
    models = _pending().models
    for row in rows:
        at = usage_time(row)
        part = usage_part(row)
        for span in SPANS:
            key = (project_id, span, bucket_start(at, span), model_key(row["model"]))
            mine = models.get(key)
            if mine is None:
                models[key] = mine = UsagePart()
            mine.merge(part, sign)


_CALL_FACTS = (
    TOOL.c.project_id,
    TOOL.c.function_name,
    TOOL.c.created_at,
    TOOL.c.is_error,
    (TOOL.c.response.is_not(None)).label("has_response"),
    TOOL.c.redactions,
    TOOL.c.response_bytes,
    TOOL.c.response_tokens,
    TOOL.c.started_at,
    TOOL.c.ended_at,
)
_USAGE_FACTS = (
    MESSAGE.c.project_id,
    SERVICE_CALL.c.model,
    SERVICE_CALL.c.created_at,
    MESSAGE.c.created_at.label("message_created_at"),
    SERVICE_CALL.c.input_tokens,
    SERVICE_CALL.c.output_tokens,
    SERVICE_CALL.c.cached_tokens,
    SERVICE_CALL.c.cost_usd,
)


def _subtract_call_rows(rows: Iterable[Any]) -> None:
    tools = _pending().tools
    for row in rows:
        m = row._mapping
        part = _hour(tools, m["project_id"], m["function_name"], m["created_at"])
        add_row(part, m, has_response=m["has_response"], sign=-1)


def remove_calls_where(*conditions: Any) -> None:
    """Before a DELETE of tool calls: subtract the calls matching ``conditions``."""
    _subtract_call_rows(db.session.execute(select(*_CALL_FACTS).where(*conditions)))


def remove_usage_where(*conditions: Any) -> None:
    """Before a DELETE of service calls: subtract those matching ``conditions`` (counted only
    in a conversation, as the roll-up counts them)."""
    rows = db.session.execute(
        select(*_USAGE_FACTS)
        .join(MESSAGE, MESSAGE.c.id == SERVICE_CALL.c.message_id)
        .where(MESSAGE.c.conversation_id.is_not(None), *conditions)
    )
    by_project: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_project.setdefault(row.project_id, []).append(row._mapping)
    for project_id, items in by_project.items():
        add_usage(project_id, items, -1)


def remove_messages(message_ids: Any) -> None:
    """Before deleting messages (their calls and usage go by cascade): ``message_ids`` is a
    list of ids or a SELECT of them."""
    remove_calls_where(TOOL.c.message_id.in_(message_ids))
    remove_usage_where(SERVICE_CALL.c.message_id.in_(message_ids))


def remove_conversations(conversation_ids: Any) -> None:
    """Before deleting conversations: ``conversation_ids`` is a list or a SELECT of ids."""
    remove_messages(select(MESSAGE.c.id).where(MESSAGE.c.conversation_id.in_(conversation_ids)))


def count_tokens(counts: Mapping[int, int]) -> None:
    """The token pass, in its write transaction before its UPDATE: ``counts`` maps call ids to
    the response tokens it will set where the row has none yet (COALESCE)."""
    ids = sorted(counts)
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        rows = db.session.execute(
            select(TOOL.c.id, TOOL.c.project_id, TOOL.c.function_name, TOOL.c.created_at).where(
                TOOL.c.id.in_(chunk), TOOL.c.response_tokens.is_(None)
            )
        )
        for row in rows:
            tokens = counts[row.id]
            part = CallPart(tokens_n=1, tokens_sum=tokens, last_at=row.created_at)
            part.sizes.add(float(tokens))
            add_call_part(row.project_id, row.function_name, part)


# --- the write, just before the commit ---------------------------------------------------------


def flush() -> None:
    """Write the transaction's deltas (the before_commit listener calls this)."""
    pending: Pending | None = db.session.info.pop(_INFO_KEY, None)
    if pending is None:
        return
    if pending.tools:
        _flush_tools(pending.tools)
    if pending.models:
        _flush_models(pending.models)


def _lock_statement(table: Any, name: str) -> Any:
    """The roll-up rows of a project whose span, bucket and name are among those given (a
    superset of the keys wanted, with expanding parameters: one compiled statement), locked
    in key order."""
    c = table.c
    return (
        select(table)
        .where(
            c.project_id == bindparam("p"),
            c.span.in_(bindparam("spans", expanding=True)),
            c.bucket.in_(bindparam("buckets", expanding=True)),
            c[name].in_(bindparam("names", expanding=True)),
        )
        .order_by(c.project_id, c.span, c.bucket, c[name])
        .with_for_update()
    )


def _update_statement(table: Any, names: tuple[str, ...]) -> Any:
    return (
        update(table)
        .where(table.c.id == bindparam("b_id"))
        .values({n: bindparam(f"b_{n}") for n in names})
    )


def _locked(statement: Any, name: str, keys: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Any]:
    """The stored rows of ``keys`` (project, span, bucket, name), by key."""
    wanted = set(keys)
    by_project: dict[int, list[tuple[Any, ...]]] = {}
    for key in keys:
        by_project.setdefault(key[0], []).append(key)
    out = {}
    for project_id, items in sorted(by_project.items()):
        for start in range(0, len(items), _CHUNK):
            chunk = items[start : start + _CHUNK]
            params = {
                "p": project_id,
                "spans": sorted({k[1] for k in chunk}),
                "buckets": sorted({k[2] for k in chunk}),
                "names": sorted({k[3] for k in chunk}),
            }
            for row in db.session.execute(statement, params):
                key = (row.project_id, row.span, _aware(row.bucket), getattr(row, name))
                if key in wanted:
                    out[key] = row
    return out


def _newest_call(project_id: int, span: int, bucket: datetime, name: str) -> datetime | None:
    return db.session.scalar(
        select(func.max(TOOL.c.created_at)).where(
            TOOL.c.project_id == project_id,
            TOOL.c.created_at >= bucket,
            TOOL.c.created_at < bucket + timedelta(seconds=span),
            TOOL.c.function_name == name,
        )
    )


_TOOL_SUMS = (
    "calls",
    "errors",
    "responses",
    "missing",
    "bytes_n",
    "bytes_sum",
    "tokens_n",
    "tokens_sum",
    "timed",
)


def _flush_tools(hours: dict[ToolKey, CallPart]) -> None:
    t = TOOL_ROLLUP
    deltas = dict(hours)
    for (project_id, _span, hour, name), part in hours.items():
        key = (project_id, DAY, bucket_start(hour, DAY), name)
        day = deltas.get(key)
        if day is None:
            deltas[key] = day = CallPart()
        day.merge(part)
    keys = sorted(deltas)
    stored = _locked(_LOCK_TOOLS, "function_name", keys)
    inserts, updates, gone = [], [], []
    for key in keys:
        delta = deltas[key]
        row = stored.get(key)
        values: dict[str, Any] = {}
        for name in _TOOL_SUMS:
            values[name] = (getattr(row, name) if row is not None else 0) + getattr(delta, name)
        values["durations"] = delta.durations.add_to_text(row.durations if row else None)
        values["sizes"] = delta.sizes.add_to_text(row.sizes if row else None)
        last = _aware(row.last_at) if row is not None and row.last_at is not None else None
        if delta.removed:
            last = _newest_call(key[0], key[1], key[2], key[3]) if values["calls"] > 0 else None
        elif delta.last_at is not None and (last is None or delta.last_at > last):
            last = delta.last_at
        values["last_at"] = last
        if values["calls"] <= 0:
            if row is not None:
                gone.append(row.id)
            continue
        if row is None:
            inserts.append(
                {"project_id": key[0], "span": key[1], "bucket": key[2], "function_name": key[3]}
                | values
            )
        else:
            updates.append({"b_id": row.id, **{f"b_{k}": v for k, v in values.items()}})
    _write(t, _UPDATE_TOOLS, inserts, updates, gone)


_MODEL_SUMS = (
    "service_calls",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cost_nano",
    "unpriced",
)


def _flush_models(deltas: dict[ModelKey, UsagePart]) -> None:
    t = MODEL_ROLLUP
    keys = sorted(deltas)
    stored = _locked(_LOCK_MODELS, "model", keys)
    inserts, updates, gone = [], [], []
    for key in keys:
        delta = deltas[key]
        row = stored.get(key)
        values = {
            name: (getattr(row, name) if row is not None else 0) + getattr(delta, name)
            for name in _MODEL_SUMS
        }
        if values["service_calls"] <= 0:
            if row is not None:
                gone.append(row.id)
            continue
        if row is None:
            inserts.append(
                {"project_id": key[0], "span": key[1], "bucket": key[2], "model": key[3]} | values
            )
        else:
            updates.append({"b_id": row.id, **{f"b_{k}": v for k, v in values.items()}})
    _write(t, _UPDATE_MODELS, inserts, updates, gone)


_LOCK_TOOLS = _lock_statement(TOOL_ROLLUP, "function_name")
_LOCK_MODELS = _lock_statement(MODEL_ROLLUP, "model")
_UPDATE_TOOLS = _update_statement(TOOL_ROLLUP, (*_TOOL_SUMS, "durations", "sizes", "last_at"))
_UPDATE_MODELS = _update_statement(MODEL_ROLLUP, _MODEL_SUMS)


def _write(
    table: Any,
    update_statement: Any,
    inserts: list[dict[str, Any]],
    updates: list[dict[str, Any]],
    gone: list[int],
) -> None:
    if inserts:
        # A concurrent writer that inserted the same bucket first makes this a unique
        # violation, which run_write retries (the row is then found and locked).
        db.session.execute(table.insert(), inserts)
    if updates:
        db.session.execute(
            update_statement, updates, execution_options={"synchronize_session": False}
        )
    if gone:
        db.session.execute(delete(table).where(table.c.id.in_(sorted(gone))))


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@event.listens_for(Session, "before_commit")
def _before_commit(session: Session) -> None:
    if session.info.get(_INFO_KEY) is not None:
        if session is db.session():
            flush()
        else:  # pragma: no cover - only the app's scoped session writes roll-ups
            session.info.pop(_INFO_KEY, None)


@event.listens_for(Session, "after_transaction_end")
def _after_transaction_end(session: Session, transaction: Any) -> None:
    if transaction.parent is None:
        session.info.pop(_INFO_KEY, None)


# --- recomputed from the rows -----------------------------------------------------------------


def recompute(
    project_id: int | None = None, executor: Any = None
) -> tuple[dict[ToolKey, CallPart], dict[ModelKey, UsagePart]]:
    """Every roll-up row as the rows say it should be (the drift test's oracle, the backfill).
    ``executor``: a connection (the migration's), else the session."""
    ex = executor if executor is not None else db.session
    tools: dict[ToolKey, CallPart] = {}
    stmt = select(*_CALL_FACTS)
    if project_id is not None:
        stmt = stmt.where(TOOL.c.project_id == project_id)
    for row in ex.execute(stmt):
        m = row._mapping
        part = call_part(m, has_response=m["has_response"])
        for span in SPANS:
            key = (m["project_id"], span, bucket_start(part.last_at, span), m["function_name"])  # type: ignore[arg-type]
            mine = tools.get(key)
            if mine is None:
                tools[key] = mine = CallPart()
            mine.merge(part)
    models: dict[ModelKey, UsagePart] = {}
    ustmt = (
        select(*_USAGE_FACTS)
        .join(MESSAGE, MESSAGE.c.id == SERVICE_CALL.c.message_id)
        .where(MESSAGE.c.conversation_id.is_not(None))
    )
    if project_id is not None:
        ustmt = ustmt.where(MESSAGE.c.project_id == project_id)
    for row in ex.execute(ustmt):
        m = row._mapping
        at = usage_time(m)
        part = usage_part(m)
        for span in SPANS:
            key = (m["project_id"], span, bucket_start(at, span), model_key(m["model"]))
            mine = models.get(key)
            if mine is None:
                models[key] = mine = UsagePart()
            mine.merge(part)
    return tools, models


def rebuild(project_id: int | None = None, executor: Any = None) -> int:
    """Replace the roll-ups (of one project, or all) by a recomputation from the rows, in the
    caller's write transaction; the number of roll-up rows written."""
    ex = executor if executor is not None else db.session
    tools, models = recompute(project_id, ex)
    for table in (TOOL_ROLLUP, MODEL_ROLLUP):
        stmt = delete(table)
        if project_id is not None:
            stmt = stmt.where(table.c.project_id == project_id)
        ex.execute(stmt)
    tool_rows = [
        {
            "project_id": k[0],
            "span": k[1],
            "bucket": k[2],
            "function_name": k[3],
            **{n: getattr(p, n) for n in _TOOL_SUMS},
            "durations": p.durations.encode(),
            "sizes": p.sizes.encode(),
            "last_at": p.last_at,
        }
        for k, p in tools.items()
    ]
    model_rows = [
        {
            "project_id": k[0],
            "span": k[1],
            "bucket": k[2],
            "model": k[3],
            **{n: getattr(p, n) for n in _MODEL_SUMS},
        }
        for k, p in models.items()
    ]
    for table, rows in ((TOOL_ROLLUP, tool_rows), (MODEL_ROLLUP, model_rows)):
        for start in range(0, len(rows), 2000):
            ex.execute(table.insert(), rows[start : start + 2000])
    if executor is None:
        db.session.info.pop(_INFO_KEY, None)
    return len(tool_rows) + len(model_rows)


__all__ = [
    "add_calls",
    "add_usage",
    "change_call",
    "count_tokens",
    "flush",
    "rebuild",
    "recompute",
    "remove_calls_where",
    "remove_conversations",
    "remove_messages",
    "remove_usage_where",
]
