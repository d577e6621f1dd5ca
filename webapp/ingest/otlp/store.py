"""Storing an OTLP export: raw rows, then the projection of the component they touch
(docs/otlp-mapping.md, 'Ownership and re-projection').

Everything here runs inside the request's write transaction (the caller opens it with
`begin_write()` and commits), so a failure leaves nothing behind:

1. new raw rows are inserted (one INSERT per table), duplicates recognised by key and digest;
2. the component: the traces of the new rows, closed over the links they share with other
   traces (tool-call ids, call signatures, conversation ids), one query per step;
3. the component's records are loaded (two queries) and projected (pure);
4. the plan is compared with the turns the projector wrote before (`otel_turn`, by digest):
   unchanged turns are left alone; changed turns have their messages replaced; turns that are
   gone are deleted, and so are provisional conversations left with nothing in them.

The number of statements does not grow with the number of spans, turns or conversations.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import (
    bindparam,
    case,
    delete,
    func,
    literal,
    literal_column,
    null,
    select,
    text,
    update,
)

from ...db import db
from ...models import (
    McpCall,
    OtelLink,
    OtelLog,
    OtelSpan,
    OtelTurn,
    OtelTurnTrace,
)
from ...redaction import NO_RULES
from ...sql import (
    CONVERSATION,
    MESSAGE,
    SERVICE_CALL,
    TOOL,
    TOOL_DEFINITION,
)
from .. import rollups
from ..calls import CallBatch, CallDraft, prepare_calls, store_calls
from ..conversations import REVISION_BUMP
from ..driver_inserts import Insert, bound, send, send_new
from ..errors import Invalid, RaceLost
from ..messages import update_messages
from ..usage import UsageDraft, price_usage
from ..values import clean_json, clean_text, compact_json
from . import mcp
from .batch import Batch
from .links import record_links
from .projection import ConversationPlan, Options, TurnPlan, project

SPAN = OtelSpan.__table__
LOG = OtelLog.__table__
LINK = OtelLink.__table__
TURN = OtelTurn.__table__
TURN_TRACE = OtelTurnTrace.__table__
MCP_CALL = McpCall.__table__
MCP_TEXT_COLUMNS = ("transport", "session_id", "request_id", "protocol_version", "error_type")

TRUNCATED = "otlp:truncated"
# A component larger than this many traces is cut (the rest is projected by later requests
# that touch it): one runaway conversation id must not make every request read the world.
MAX_COMPONENT_TRACES = 5_000


@dataclass
class StoreContext:
    project_id: int
    now: datetime
    max_result_bytes: int
    options: Options
    price_overrides: dict[str, Any] | None = None


@dataclass
class StoreResult:
    stored_spans: int = 0
    stored_logs: int = 0
    duplicates: int = 0
    warnings: list[str] = field(default_factory=list)
    turns_written: int = 0


def to_datetime(ns: int | None) -> datetime | None:
    """Unix nanoseconds → an aware UTC datetime, floored to the microsecond."""
    if ns is None or ns <= 0:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)


# --- 1. Raw rows ------------------------------------------------------------------------------


def _lock(project_id: int, traces: Iterable[str], links: Iterable[str] = ()) -> None:
    """Serialize requests that touch the same traces or share a link (PostgreSQL; SQLite has
    one writer). Links matter as much as traces: two requests with spans of two traces that one
    tool-call id joins must not both project their half alone, each unaware of the other's
    uncommitted rows. One statement, the locks taken in sorted order."""
    if db.session.get_bind().dialect.name != "postgresql":
        return
    names = [f"t:{t}" for t in traces] + [f"l:{mcp.lock_name(link)}" for link in links]
    keys = sorted(
        {
            int.from_bytes(
                hashlib.sha256(f"{project_id}:{name}".encode()).digest()[:8], "big", signed=True
            )
            for name in names
        }
    )
    if keys:
        db.session.execute(
            text(
                "SELECT pg_advisory_xact_lock(k) FROM "
                "(SELECT unnest(CAST(:keys AS bigint[])) AS k ORDER BY 1) AS ordered"
            ),
            {"keys": keys},
        )


def _json_text(value: Any) -> str:
    """A JSON column's value as text, serialized once; NUL (which PostgreSQL refuses) becomes
    U+FFFD as everywhere else in the write path."""
    data = compact_json(value)
    return compact_json(clean_json(value)) if "\\u0000" in data else data


_SPAN_INSERT = Insert(
    SPAN,
    (
        "project_id",
        "trace_id",
        "span_id",
        "parent_span_id",
        "name",
        "kind",
        "start_ns",
        "end_ns",
        "status_code",
        "status_message",
        "scope_name",
        "scope_version",
        "service_name",
        "span_class",
        "resource",
        "attributes",
        "events",
        "links",
        "record",
        "digest",
        "received_at",
    ),
    json_text=("resource", "attributes", "events", "links", "record"),
)
_LOG_INSERT = Insert(
    LOG,
    (
        "project_id",
        "trace_id",
        "span_id",
        "fingerprint",
        "event_name",
        "time_ns",
        "observed_ns",
        "service_name",
        "attributes",
        "record",
        "received_at",
    ),
    json_text=("attributes", "record"),
)
_LINK_INSERT = Insert(LINK, ("project_id", "link", "trace_id"))


_CONVERSATION_INSERT = Insert(
    CONVERSATION,
    (
        "project_id",
        "external_id",
        "title",
        "metadata",
        "system_prompt",
        "created_at",
        "updated_at",
        "revision",
    ),
    returning=("external_id", "id"),
)
# The columns of a message row (`_message_rows`) as inserted, then `imported` (False).
_MESSAGE_ROW = (
    "project_id",
    "external_id",
    "role",
    "content",
    "created_at",
    "status",
    "model",
    "content_tokens",
    "conversation_id",
)
_MESSAGE_INSERT = Insert(MESSAGE, (*_MESSAGE_ROW, "imported"), returning=("external_id", "id"))
_USAGE_INSERT = Insert(
    SERVICE_CALL,
    (
        "message_id",
        "round_index",
        "model",
        "provider",
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "created_at",
        "started_at",
        "ended_at",
        "content",
        "cost_usd",
        "price_source",
        "price_version",
    ),
)
_TURN_INSERT = Insert(
    TURN,
    (
        "project_id",
        "turn_key",
        "conversation_id",
        "user_message_id",
        "assistant_message_id",
        "digest",
        "content_captured",
    ),
    returning=("id", "turn_key"),
)
_TURN_TRACE_INSERT = Insert(TURN_TRACE, ("turn_id", "trace_id", "project_id"))
_MCP_INSERT = Insert(
    MCP_CALL,
    (
        "tool_invocation_id",
        "project_id",
        *MCP_TEXT_COLUMNS,
        "server",
        "method",
        "duration_ms",
        "server_duration_ms",
        "trace_id",
        "span_id",
    ),
)


def _span_row(ctx: StoreContext, span: Any) -> list[Any]:
    """The span's values in `_SPAN_INSERT.columns` order."""
    return [
        ctx.project_id,
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        clean_text(span.name),
        span.kind,
        span.start_ns,
        span.end_ns,
        span.status_code,
        clean_text(span.status_message),
        clean_text(span.scope_name),
        clean_text(span.scope_version),
        clean_text(span.service_name),
        span.record["class"],
        _json_text(span.resource),
        _json_text(span.attributes),
        _json_text(span.events),
        _json_text(span.links),
        _json_text(span.record),
        span.digest,
        ctx.now,
    ]


def _log_row(ctx: StoreContext, record: Any) -> list[Any]:
    """The log record's values in `_LOG_INSERT.columns` order."""
    return [
        ctx.project_id,
        record.trace_id,
        record.span_id,
        record.fingerprint,
        clean_text(record.event_name),
        record.time_ns,
        record.observed_ns,
        clean_text(record.service_name),
        _json_text(record.attributes),
        _json_text(record.record),
        ctx.now,
    ]


def _new_rows(ctx: StoreContext, batch: Batch, result: StoreResult) -> _NewRows:
    """The batch's spans and log records that are not stored yet (one query each), with the
    links they bring; a span stored before with other content is a warning."""
    new = _NewRows()
    if batch.spans:
        stored = {
            (r.trace_id, r.span_id): r.digest
            for r in db.session.execute(
                select(SPAN.c.trace_id, SPAN.c.span_id, SPAN.c.digest).where(
                    SPAN.c.project_id == ctx.project_id,
                    SPAN.c.trace_id.in_(sorted({s.trace_id for s in batch.spans})),
                )
            )
        }
        for span in batch.spans:
            known = stored.get(span.key)
            if known is None:
                new.spans.append(_span_row(ctx, span))
                new.records.append(span.record)
                new.links |= {(link, span.trace_id) for link in record_links(span.record)}
            elif known != span.digest:
                result.duplicates += 1
                result.warnings.append(
                    f"span {span.span_id} of trace {span.trace_id} was stored before with "
                    "different content; the first one is kept"
                )
    if batch.logs:
        stored_logs = {
            (r.trace_id, r.span_id, r.fingerprint)
            for r in db.session.execute(
                select(LOG.c.trace_id, LOG.c.span_id, LOG.c.fingerprint).where(
                    LOG.c.project_id == ctx.project_id,
                    LOG.c.trace_id.in_(sorted({r.trace_id for r in batch.logs})),
                )
            )
        }
        for record in batch.logs:
            if record.key in stored_logs:
                continue
            new.logs.append(_log_row(ctx, record))
            if record.trace_id:
                new.log_records.append(record.record)
                new.links |= {(link, record.trace_id) for link in record_links(record.record)}
    bound(_SPAN_INSERT, new.spans)
    bound(_LOG_INSERT, new.logs)
    new.link_rows = bound(
        _LINK_INSERT, [[ctx.project_id, link, t] for link, t in sorted(new.links)]
    )
    return new


def _insert_rows(new: _NewRows) -> None:
    """One statement per table. A span or log record inserted meanwhile by a concurrent writer
    is a lost race; a link may be stored already (another trace brought it)."""
    if new.spans:
        send_new(_SPAN_INSERT, new.spans)
    if new.logs:
        send_new(_LOG_INSERT, new.logs)
    if new.link_rows:
        send(_LINK_INSERT, new.link_rows)


# --- 2. The component -------------------------------------------------------------------------


# The links a stored link meets: itself, or an MCP link's counterpart (mcp.counterpart, in SQL).
def _meets(link: Any, onward: bool) -> Any:
    """The SQL of what `link` meets. Past the first step (`onward`), an ask is not followed: an
    MCP span's model calls are found from it, not the other model calls of its minute from
    them, so busy services make no chains of minutes."""
    prefix = func.substr(link, 1, 2)
    return case(
        (prefix == mcp.OFFER, literal(mcp.ASK) + func.substr(link, 3)),
        (prefix == mcp.ASK, null() if onward else literal(mcp.OFFER) + func.substr(link, 3)),
        else_=link,
    )


# The links of given traces are read through the (project_id, trace_id) index. SQLite without
# ANALYZE statistics (nothing runs ANALYZE) took the primary key (project_id, link, trace_id)
# instead, which covers the query and whose first column it guesses selective: every export
# scanned all the links of its project, twice (the 2026-11-27 profile: 40 ms of CPU per export
# at 30,000 links, growing with the project). INDEXED BY names the index; other databases
# keep statistics.
_BY_TRACE = next(iter(LINK.indexes)).name


@cache
def _links_by_trace(dialect: str) -> tuple[Any, Any, Any, Any]:
    """The link table to read by trace id, with its columns link, project_id and trace_id."""
    if dialect != "sqlite":
        return LINK, LINK.c.link, LINK.c.project_id, LINK.c.trace_id
    columns = (literal_column(f"{LINK.name}.{name}") for name in ("link", "project_id", "trace_id"))
    return (text(f"{LINK.name} INDEXED BY {_BY_TRACE}"), *columns)


def _component(project_id: int, traces: set[str], links: set[str]) -> set[str]:
    """The traces linked to `traces` (whose links not stored yet are `links`), directly or
    through others: one query per step. No DISTINCT in SQL: with it SQLite walks the
    (project_id, trace_id) index for its order instead of looking the links up."""
    component = set(traces)
    if links:
        # An MCP link meets its counterpart only (docs/otlp-mapping.md, 'MCP calls').
        meets = sorted({mcp.counterpart(link) for link in links})
        component |= set(
            db.session.scalars(
                select(LINK.c.trace_id).where(
                    LINK.c.project_id == project_id, LINK.c.link.in_(meets)
                )
            )
        )
    frontier = set(component)
    source, link, project, trace = _links_by_trace(db.session.get_bind().dialect.name)
    onward = False
    while frontier and len(component) < MAX_COMPONENT_TRACES:
        own_links = (
            select(_meets(link, onward))
            .select_from(source)
            .where(project == project_id, trace.in_(sorted(frontier)))
        )
        found = set(
            db.session.scalars(
                select(LINK.c.trace_id).where(
                    LINK.c.project_id == project_id, LINK.c.link.in_(own_links)
                )
            )
        )
        frontier = found - component
        component |= frontier
        onward = True
    return component


def _fingerprint(project_id: int, traces: Sequence[str]) -> tuple[Any, ...]:
    """What a concurrent writer would have changed in the component: its raw rows."""
    out: list[Any] = []
    for table in (SPAN, LOG):
        out += db.session.execute(
            select(func.count(), func.coalesce(func.max(table.c.id), 0)).where(
                table.c.project_id == project_id, table.c.trace_id.in_(traces)
            )
        ).one()
    return tuple(out)


def _load_records(project_id: int, traces: Sequence[str]) -> tuple[list[dict], list[dict]]:
    spans = list(
        db.session.scalars(
            select(SPAN.c.record).where(
                SPAN.c.project_id == project_id, SPAN.c.trace_id.in_(traces)
            )
        )
    )
    logs = list(
        db.session.scalars(
            select(LOG.c.record).where(LOG.c.project_id == project_id, LOG.c.trace_id.in_(traces))
        )
    )
    return spans, logs


# --- 3. Planning before the write lock, writing inside it -------------------------------------


@dataclass
class _NewRows:
    # The rows to insert, in their bound form (`_bound`): `_SPAN_INSERT`'s, `_LOG_INSERT`'s
    # and `_LINK_INSERT`'s columns in order (the trace id second in each).
    spans: list[list[Any]] = field(default_factory=list)
    logs: list[list[Any]] = field(default_factory=list)
    link_rows: list[list[Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    log_records: list[dict[str, Any]] = field(default_factory=list)
    links: set[tuple[str, str]] = field(default_factory=set)

    @property
    def traces(self) -> set[str]:
        return {r[1] for r in self.spans} | {r[1] for r in self.logs if r[1]}


@dataclass
class PreparedExport:
    """An export with everything worked out from what was stored when it was read: the new
    rows, the component and its projection, and the rows to write. Writing it checks that the
    component did not change meanwhile (else it is worked out again, inside the lock)."""

    batch: Batch
    result: StoreResult
    new: _NewRows
    component: list[str] = field(default_factory=list)
    fingerprint: tuple[Any, ...] = ()
    writes: _TurnWrites | None = None


def prepare_export(ctx: StoreContext, batch: Batch) -> PreparedExport:
    """The reading and CPU work of an export, done before the write lock (read queries only)."""
    result = StoreResult(warnings=list(batch.warnings))
    new = _new_rows(ctx, batch, result)
    prepared = PreparedExport(batch, result, new)
    touched = new.traces
    if not touched:
        return prepared  # nothing new: the projection cannot have changed
    component = _component(ctx.project_id, touched, {link for link, _ in new.links})
    prepared.component = sorted(component)
    prepared.fingerprint = _fingerprint(ctx.project_id, prepared.component)
    spans, logs = _load_records(ctx.project_id, prepared.component)
    plans = project([*spans, *new.records], [*logs, *new.log_records], ctx.options)
    prepared.writes = _plan_writes(ctx, plans, _old_turns(ctx.project_id, prepared.component))
    return prepared


def write_export(ctx: StoreContext, prepared: PreparedExport) -> StoreResult:
    """Store a prepared export in the write transaction; re-plan if the component changed."""
    if not prepared.new.traces:
        return prepared.result
    _lock(ctx.project_id, prepared.component, {link for link, _ in prepared.new.links})
    for _attempt in range(3):
        # The conversations the plan writes into or takes turns from are held before the
        # component is read again: a delete of one (which takes no advisory lock) either
        # committed before, and the check below sees its raw rows gone, or waits for this write.
        _hold_conversations(ctx.project_id, prepared.writes)
        component = _component(
            ctx.project_id, prepared.new.traces, {link for link, _ in prepared.new.links}
        )
        if (
            sorted(component) == prepared.component
            and _fingerprint(ctx.project_id, prepared.component) == prepared.fingerprint
        ):
            break
        # A concurrent export or delete changed what this one read: work it out again, in
        # the lock (and hold the conversations of the new plan before checking once more).
        prepared = prepare_export(ctx, prepared.batch)
        if not prepared.new.traces:
            return prepared.result
        _lock(ctx.project_id, prepared.component)
    else:
        raise RaceLost()  # the component kept changing: run_write runs the request again
    _insert_rows(prepared.new)
    result = prepared.result
    result.stored_spans, result.stored_logs = len(prepared.new.spans), len(prepared.new.logs)
    assert prepared.writes is not None
    result.turns_written = _apply_writes(ctx, prepared.writes)
    return result


def _hold_conversations(project_id: int, planned: _TurnWrites | None) -> None:
    """Lock the existing conversations `planned` touches FOR KEY SHARE until the write commits
    (PostgreSQL), in id order: as the native writers do (`ingest.conversations`), so that a
    delete waits for this write or this write for the delete (`ingest.deletes`). One query."""
    if planned is None or db.session.get_bind().dialect.name != "postgresql":
        return
    external_ids = sorted({p.external_id for p in planned.plans})
    ids = sorted({row["conversation_id"] for row in planned.gone})
    if not external_ids and not ids:
        return
    db.session.execute(
        select(CONVERSATION.c.id)
        .where(
            CONVERSATION.c.project_id == project_id,
            CONVERSATION.c.external_id.in_(external_ids) | CONVERSATION.c.id.in_(ids),
        )
        .order_by(CONVERSATION.c.id)
        .with_for_update(read=True, key_share=True)
    ).all()


def _old_turns(project_id: int, traces: Sequence[str]) -> dict[str, dict[str, Any]]:
    turn_ids = select(TURN_TRACE.c.turn_id).where(
        TURN_TRACE.c.project_id == project_id, TURN_TRACE.c.trace_id.in_(traces)
    )
    rows = db.session.execute(
        select(TURN).where(TURN.c.project_id == project_id, TURN.c.id.in_(turn_ids))
    ).mappings()
    return {r["turn_key"]: dict(r) for r in rows}


@dataclass
class _TurnWrite:
    """A turn to (re)write, with its rows prepared: messages, calls and priced usage."""

    turn: TurnPlan
    conversation: str
    digest: str
    messages: list[dict[str, Any]]
    calls: list[Any]
    usage: list[dict[str, Any]]


@dataclass
class _TurnWrites:
    plans: list[ConversationPlan]
    writes: list[_TurnWrite]
    gone: list[dict[str, Any]]  # old otel_turn rows to delete (gone or changed)


def _plan_writes(
    ctx: StoreContext, plans: list[ConversationPlan], old: dict[str, dict[str, Any]]
) -> _TurnWrites:
    """Which turns changed (by digest) and their rows, tokens counted and costs priced: the CPU
    work of writing, done before the lock."""
    writes, keep = [], set()
    for plan in plans:
        for turn in plan.turns:
            digest = turn.digest()
            before = old.get(turn.key)
            if before is not None and before["digest"] == digest:
                keep.add(turn.key)
                continue
            writes.append(
                _TurnWrite(
                    turn,
                    plan.external_id,
                    digest,
                    _message_rows(ctx, turn),
                    _prepared_calls(ctx, turn),
                    _usage_rows(ctx, turn),
                )
            )
    gone = [row for key, row in old.items() if key not in keep]
    return _TurnWrites(plans, writes, gone)


def _apply_writes(ctx: StoreContext, planned: _TurnWrites) -> int:
    written = {w.conversation for w in planned.writes}
    conversation_ids, made = _ensure_conversations(ctx, planned.plans, written)
    reused = _release_turns(planned.gone, planned.writes)
    _insert_turns(ctx, planned.writes, conversation_ids, reused)
    changed = {conversation_ids[w.conversation] for w in planned.writes}
    changed |= {row["conversation_id"] for row in planned.gone}
    _update_conversations(ctx, planned.plans, conversation_ids, changed, made)
    emptied = {row["conversation_id"] for row in planned.gone} - set(conversation_ids.values())
    _drop_empty_provisional(emptied)
    return len(planned.writes)


def _ensure_conversations(
    ctx: StoreContext, plans: list[ConversationPlan], written: set[str]
) -> tuple[dict[str, int], set[int]]:
    """The conversations' ids by external id, and the ids of those made now. One made now
    that turns are written into is inserted as `_update_conversations` would leave it (its
    revision bumped once), so that it is not updated as well."""
    if not plans:
        return {}, set()
    external_ids = sorted(p.external_id for p in plans)
    found = {
        r.external_id: r.id
        for r in db.session.execute(
            select(CONVERSATION.c.id, CONVERSATION.c.external_id).where(
                CONVERSATION.c.project_id == ctx.project_id,
                CONVERSATION.c.external_id.in_(external_ids),
            )
        )
    }
    rows = [
        [
            ctx.project_id,
            p.external_id,
            "",
            p.metadata,
            clean_text(p.system_prompt),
            to_datetime(p.created_ns) or ctx.now,
            ctx.now,
            1 if p.external_id in written else 0,
        ]
        for p in sorted(plans, key=lambda p: p.external_id)
        if p.external_id not in found
    ]
    made: set[int] = set()
    if rows:
        new = dict(send_new(_CONVERSATION_INSERT, bound(_CONVERSATION_INSERT, rows)))
        found.update(new)
        made = set(new.values())
    return found, made


def _release_turns(gone: list[dict[str, Any]], writes: list[_TurnWrite]) -> dict[str, int]:
    """Remove the turns being replaced or gone. Their messages that the new plan writes again
    (same external id) are kept, with their row ids, so that an open page refreshes them in
    place; their calls and usage go (they are written anew). The rest of their messages are
    deleted (calls and usage go with them, by cascade). Returns the kept ids by external id."""
    if not gone:
        return {}
    old_ids = [r["assistant_message_id"] for r in gone] + [
        r["user_message_id"] for r in gone if r["user_message_id"] is not None
    ]
    by_external = {
        r.external_id: r.id
        for r in db.session.execute(
            select(MESSAGE.c.id, MESSAGE.c.external_id).where(MESSAGE.c.id.in_(sorted(old_ids)))
        )
    }
    wanted = {row["external_id"] for w in writes for row in w.messages}
    reused = {e: i for e, i in by_external.items() if e in wanted}
    dropped = sorted(i for e, i in by_external.items() if e not in wanted)
    if dropped:
        rollups.remove_messages(dropped)
        db.session.execute(delete(MESSAGE).where(MESSAGE.c.id.in_(dropped)))
    if reused:
        kept = sorted(reused.values())
        rollups.remove_messages(kept)  # their calls and usage are written anew
        db.session.execute(delete(TOOL).where(TOOL.c.message_id.in_(kept)))
        db.session.execute(delete(SERVICE_CALL).where(SERVICE_CALL.c.message_id.in_(kept)))
    db.session.execute(delete(TURN).where(TURN.c.id.in_(sorted(r["id"] for r in gone))))
    return reused


def _cut(text_value: str, limit: int) -> str:
    """`text_value` cut to at most `limit` UTF-8 bytes, at a character boundary."""
    return text_value.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def _message_rows(ctx: StoreContext, turn: TurnPlan) -> list[dict[str, Any]]:
    start = to_datetime(turn.start_ns) or ctx.now
    rows = []
    if turn.user_content is not None:
        content = clean_text(turn.user_content)
        rows.append(
            {
                "project_id": ctx.project_id,
                "external_id": turn.user_id,
                "role": "user",
                "content": content,
                "created_at": start,
                "status": None,
                "model": None,
                "content_tokens": None,  # counted by the token pass
            }
        )
    content = clean_text(turn.assistant_content)
    rows.append(
        {
            "project_id": ctx.project_id,
            "external_id": turn.assistant_id,
            "role": "assistant",
            "content": content,
            "created_at": start + timedelta(microseconds=1),
            "status": turn.status,
            "model": clean_text(turn.model[:200] if turn.model else None),
            "content_tokens": None,  # counted by the token pass
        }
    )
    return rows


def _usage_rows(ctx: StoreContext, turn: TurnPlan) -> list[dict[str, Any]]:
    """Service-call rows of the turn's rounds, priced as the native API prices them. A cached
    count above the input count (an older convention) leaves the cost unknown."""
    rows = []
    for plan in turn.rounds:
        if plan.usage is None:
            continue
        u = plan.usage
        row = {
            "round_index": plan.index,
            "model": clean_text(u.model[:200] if u.model else None) or turn.model,
            "provider": clean_text(u.provider[:64] if u.provider else None),
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "cached_tokens": u.cached_tokens,
            "created_at": to_datetime(u.created_ns) or ctx.now,
            # The LLM span's start and end: the round's latency.
            "started_at": to_datetime(u.created_ns),
            "ended_at": to_datetime(u.ended_ns) if u.ended_ns else None,
            "content": clean_text(u.content),
        }
        draft = UsageDraft(field=f"round {plan.index}", round_index=plan.index)
        try:
            price_usage(row, draft, ctx.price_overrides)
        except Invalid:
            row.update(cost_usd=None, price_source=None, price_version=None)
        rows.append(row)
    return rows


def _insert_turns(
    ctx: StoreContext,
    writes: list[_TurnWrite],
    conversation_ids: dict[str, int],
    reused: dict[str, int],
) -> None:
    """Write the turns' messages (in place when they existed), calls, usage and turn rows."""
    if not writes:
        return
    writes.sort(key=lambda w: w.turn.key)
    message_rows = [
        {**row, "conversation_id": conversation_ids[w.conversation]}
        for w in writes
        for row in w.messages
    ]
    ids = dict(reused)
    update_messages(
        {**row, "id": reused[row["external_id"]]}
        for row in message_rows
        if row["external_id"] in reused
    )
    inserts = [
        [row[c] for c in _MESSAGE_ROW] + [False]
        for row in message_rows
        if row["external_id"] not in reused
    ]
    if inserts:
        ids.update(dict(send_new(_MESSAGE_INSERT, bound(_MESSAGE_INSERT, inserts))))
    # Every message written here has no calls stored: new ones were just inserted, and the
    # kept ones lost theirs in `_release_turns`. So store_calls reads none (new_message).
    stored_calls = store_calls(
        ctx.project_id,
        [
            CallBatch(ids[w.turn.assistant_id], w.turn.assistant_id, w.calls, new_message=True)
            for w in writes
            if w.calls
        ],
    )
    _insert_mcp(ctx, writes, ids, stored_calls)
    usage = [{**row, "message_id": ids[w.turn.assistant_id]} for w in writes for row in w.usage]
    if usage:
        send(
            _USAGE_INSERT,
            bound(_USAGE_INSERT, [[row[c] for c in _USAGE_INSERT.columns] for row in usage]),
        )
        rollups.add_usage(ctx.project_id, usage)
    turn_rows = [
        [
            ctx.project_id,
            w.turn.key,
            conversation_ids[w.conversation],
            ids.get(w.turn.user_id) if w.turn.user_content is not None else None,
            ids[w.turn.assistant_id],
            w.digest,
            w.turn.content_captured,
        ]
        for w in writes
    ]
    turn_ids = {key: i for i, key in send_new(_TURN_INSERT, bound(_TURN_INSERT, turn_rows))}
    send(
        _TURN_TRACE_INSERT,
        [
            [turn_ids[w.turn.key], trace_id, ctx.project_id]
            for w in writes
            for trace_id in w.turn.traces
        ],
    )


def _insert_mcp(
    ctx: StoreContext,
    writes: list[_TurnWrite],
    ids: dict[str, int],
    stored_calls: dict[int, list[dict[str, Any]]],
) -> None:
    """The MCP details of the calls an exchange carried (docs/otlp-mapping.md, 'MCP calls'):
    one row per call, deleted with it."""
    rows = []
    for w in writes:
        message_id = ids[w.turn.assistant_id]
        call_ids = {
            (r["round_index"], r["sequence_index"]): r["id"]
            for r in stored_calls.get(message_id, ())
        }
        for plan in w.turn.rounds:
            for call in plan.calls:
                call_id = call_ids.get((plan.index, call.sequence_index))
                if call.mcp is None or call_id is None:
                    continue
                rows.append(
                    {
                        "tool_invocation_id": call_id,
                        "project_id": ctx.project_id,
                        **{k: clean_text(call.mcp.get(k)) for k in MCP_TEXT_COLUMNS},
                        "server": clean_text(call.mcp.get("server")) or "",
                        "method": clean_text(call.mcp.get("method")) or "tools/call",
                        "duration_ms": call.mcp.get("duration_ms"),
                        "server_duration_ms": call.mcp.get("server_duration_ms"),
                        "trace_id": call.mcp["trace_id"],
                        "span_id": call.mcp["span_id"],
                    }
                )
    if rows:
        send(_MCP_INSERT, bound(_MCP_INSERT, [[r[c] for c in _MCP_INSERT.columns] for r in rows]))


def _prepared_calls(ctx: StoreContext, turn: TurnPlan) -> list[Any]:
    """The turn's calls through the write path's preparation (token counts, sizes): redaction
    already happened before storage, so no rules are applied again; results over the limit are
    cut instead of refused (an exporter cannot fix its batch)."""
    drafts, names = [], {}
    for plan in turn.rounds:
        for call in plan.calls:
            response = call.response
            redactions = list(call.redactions)
            if (
                response is not None
                and len(response.encode("utf-8", "surrogatepass")) > ctx.max_result_bytes
            ):
                response = _cut(response, ctx.max_result_bytes)
                redactions.append(TRUNCATED)
            draft = CallDraft(
                field=f"{turn.assistant_id}.{plan.index}.{call.sequence_index}",
                round_index=plan.index,
                sequence_index=call.sequence_index,
                external_id=clean_text(call.external_id[:255]) or "",
                function_name=clean_text(call.function_name[:255]) or "",
                arguments=call.arguments,
                response=response,
                is_error=call.is_error,
                created_at=to_datetime(call.created_ns),
                started_at=to_datetime(call.started_ns),
                ended_at=to_datetime(call.ended_ns),
                response_created_at=to_datetime(call.response_ns),
            )
            drafts.append(draft)
            names[(plan.index, call.sequence_index)] = redactions
    prepared = prepare_calls(drafts, NO_RULES, now=ctx.now, max_result_bytes=ctx.max_result_bytes)
    for call in prepared:
        call.row["redactions"] = names[call.key] or None
    return prepared


def _update_conversations(
    ctx: StoreContext,
    plans: list[ConversationPlan],
    conversation_ids: dict[str, int],
    changed: set[int],
    made: set[int],
) -> None:
    """Conversations whose turns changed: their projected fields (OTLP-made conversations
    only: a conversation made through the API keeps its own), tools, and last activity.
    Those `made` by this write were inserted so (`_ensure_conversations`): their tools only."""
    touched = [p for p in plans if conversation_ids[p.external_id] in changed]
    with_tools = [p for p in touched if p.tools]
    ids = sorted(conversation_ids[p.external_id] for p in touched)
    # Conversations that only lost turns (moved elsewhere) are not among the plans: what their
    # replay reads changed all the same (webapp.services.replay_cache).
    untouched = sorted(changed - set(ids))
    touched = [p for p in touched if conversation_ids[p.external_id] not in made]
    ids = sorted(conversation_ids[p.external_id] for p in touched)
    if untouched:
        db.session.execute(
            update(CONVERSATION)
            .where(CONVERSATION.c.id.in_(untouched))
            .values(revision=REVISION_BUMP)
        )
    if touched:
        _refresh_conversations(ctx, touched, conversation_ids, ids)
    if with_tools:
        old = sorted(conversation_ids[p.external_id] for p in with_tools)
        old = [i for i in old if i not in made]
        if old:
            db.session.execute(
                delete(TOOL_DEFINITION).where(TOOL_DEFINITION.c.conversation_id.in_(old))
            )
        db.session.execute(
            TOOL_DEFINITION.insert(),
            [
                {
                    "conversation_id": conversation_ids[p.external_id],
                    "name": clean_text(tool["name"]),
                    "description": clean_text(tool.get("description")),
                    "parameters": clean_json(tool.get("parameters")),
                }
                for p in with_tools
                for tool in {t["name"]: t for t in p.tools}.values()
            ],
        )


def _refresh_conversations(
    ctx: StoreContext,
    touched: list[ConversationPlan],
    conversation_ids: dict[str, int],
    ids: list[int],
) -> None:
    stored = {
        r.id: r
        for r in db.session.execute(
            select(CONVERSATION.c.id, CONVERSATION.c.metadata, CONVERSATION.c.system_prompt).where(
                CONVERSATION.c.id.in_(ids)
            )
        )
    }
    params = []
    for plan in touched:
        row = stored[conversation_ids[plan.external_id]]
        owned = (row.metadata or {}).get("source") == "otlp"
        params.append(
            {
                "b_id": row.id,
                "b_metadata": {**(row.metadata or {}), **plan.metadata} if owned else row.metadata,
                "b_system_prompt": clean_text(plan.system_prompt)
                if owned or row.system_prompt is None
                else row.system_prompt,
                "b_created_at": to_datetime(plan.created_ns) if owned else None,
            }
        )
    db.session.execute(
        update(CONVERSATION)
        .where(CONVERSATION.c.id == bindparam("b_id"))
        .values(
            metadata=bindparam("b_metadata"),
            system_prompt=bindparam("b_system_prompt"),
            # Typed: untyped, SQLite's driver wrote its own text of the datetime
            # ('... 08:53:20+00:00'), not the column's ('... 08:53:20.000000') that the
            # insert writes and the other timestamps have, so that they sort together.
            created_at=func.coalesce(
                bindparam("b_created_at", type_=CONVERSATION.c.created_at.type),
                CONVERSATION.c.created_at,
            ),
            updated_at=ctx.now,
            revision=REVISION_BUMP,
        ),
        params,
        execution_options={"synchronize_session": False},
    )


def _drop_empty_provisional(candidates: set[int]) -> None:
    """Conversations the projector made that no turn and no other message holds any more."""
    if not candidates:
        return
    ids = sorted(candidates)
    still_used = set(
        db.session.scalars(
            select(MESSAGE.c.conversation_id).where(MESSAGE.c.conversation_id.in_(ids)).distinct()
        )
    )
    empty = [
        r.id
        for r in db.session.execute(
            select(CONVERSATION.c.id, CONVERSATION.c.metadata).where(CONVERSATION.c.id.in_(ids))
        )
        if r.id not in still_used and (r.metadata or {}).get("source") == "otlp"
    ]
    if empty:
        db.session.execute(delete(CONVERSATION).where(CONVERSATION.c.id.in_(empty)))
