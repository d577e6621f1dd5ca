"""Per-tool statistics over a project, from the roll-ups (``webapp.queries.rollups``): counts,
errors, averages and the newest call are exact sums of whole buckets (and of the rows of a
range's partial edges). Latency percentiles are exact (nearest rank, one window-function query
over the rows) while the range holds at most ``EXACT_PERCENTILES_MAX_CALLS`` calls, which keeps
that query bounded; above, they come from the merged DDSketches, within 1 % of the value at
their rank, and the stats say so (``approximate``: the page shows "≈")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, or_, select

from ..analytics.rollups import quantiles
from ..db import db
from ..models import Conversation, Message, ToolInvocation
from ..sql import after_key, as_int, awaiting_response, duration_ms
from . import rollups

T = ToolInvocation
PERCENTILES = (50, 95)
# Up to this many calls in the range, percentiles are read exactly from the rows.
EXACT_PERCENTILES_MAX_CALLS = 2_000


@dataclass(frozen=True, slots=True)
class ToolStats:
    function_name: str
    calls: int
    errors: int
    missing_responses: int
    avg_response_bytes: float | None
    avg_response_tokens: float | None
    last_seen: datetime | None
    p50_ms: float | None = None
    p95_ms: float | None = None
    timed_calls: int = 0
    # The percentiles come from the roll-ups' sketches (within 1 %), not from the rows.
    approximate: bool = False

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


def _period(since: datetime | None, until: datetime | None) -> list[Any]:
    """Calls made at or after ``since`` and before ``until`` (the time range picker's)."""
    return [
        *([T.created_at >= since] if since is not None else []),
        *([T.created_at < until] if until is not None else []),
    ]


def _aggregates_from_rows(
    project_id: int, function_name: str | None, period: list[Any]
) -> list[Any]:
    """The same figures as tool_stats, GROUP BY over the rows (the roll-ups' tests compare)."""
    stmt = (
        select(
            T.function_name,
            func.count().label("calls"),
            func.sum(case((T.is_error, 1), else_=0)).label("errors"),
            func.sum(case((awaiting_response(T), 1), else_=0)).label("missing"),
            func.avg(T.response_bytes).label("avg_bytes"),
            func.avg(T.response_tokens).label("avg_tokens"),
            func.max(T.created_at).label("last_seen"),
        )
        .where(T.project_id == project_id, *period)
        .group_by(T.function_name)
        .order_by(func.count().desc(), T.function_name)
    )
    if function_name is not None:
        stmt = stmt.where(T.function_name == function_name)
    return list(db.session.execute(stmt))


def _percentiles(
    project_id: int, function_name: str | None, period: list[Any]
) -> dict[str, dict[str, float | int]]:
    """{function_name: {"p50": ms, "p95": ms, "timed": n}} from calls with start and end."""
    duration = duration_ms(T.started_at, T.ended_at)
    timed = select(T.function_name, duration.label("ms")).where(
        T.project_id == project_id, T.started_at.is_not(None), T.ended_at.is_not(None), *period
    )
    if function_name is not None:
        timed = timed.where(T.function_name == function_name)
    timed_sq = timed.subquery()
    ranked = select(
        timed_sq.c.function_name,
        timed_sq.c.ms,
        func.row_number()
        .over(partition_by=timed_sq.c.function_name, order_by=timed_sq.c.ms)
        .label("rank"),
        func.count().over(partition_by=timed_sq.c.function_name).label("n"),
    ).subquery()
    # Nearest rank: the value at position ceil(p/100 * n), in integer arithmetic.
    wanted = [ranked.c.rank == (ranked.c.n * p + 99) // 100 for p in PERCENTILES]
    rows = db.session.execute(
        select(ranked.c.function_name, ranked.c.ms, ranked.c.rank, ranked.c.n).where(or_(*wanted))
    )
    result: dict[str, dict[str, float | int]] = {}
    for row in rows:
        entry = result.setdefault(row.function_name, {"timed": as_int(row.n)})
        for p in PERCENTILES:
            if row.rank == (row.n * p + 99) // 100:
                # Rounded: SQLite's julianday() arithmetic is only good to ~0.05 ms.
                entry[f"p{p}"] = round(float(row.ms), 1)
    return result


def tool_stats(
    project_id: int,
    function_name: str | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[ToolStats]:
    """Statistics per function name, most used first, over the calls made in [since, until)
    when given: from the roll-ups (two to four queries), whatever the number of calls."""
    totals = rollups.tool_totals(project_id, since, until, function_name, sketches=())
    approximate = sum(t.calls for t in totals.values()) > EXACT_PERCENTILES_MAX_CALLS
    if approximate:  # the sums again, with the sketches: only past the exact path's bound
        totals = rollups.tool_totals(
            project_id, since, until, function_name, sketches=("durations",)
        )
    exact = {} if approximate else _percentiles(project_id, function_name, _period(since, until))
    stats = []
    for name, t in sorted(totals.items(), key=lambda item: (-item[1].calls, item[0])):
        if approximate:
            p: dict[str, float | int] = {"timed": t.timed}
            values = quantiles(t.durations, [q / 100 for q in PERCENTILES])
            for q, value in zip(PERCENTILES, values, strict=True):
                if value is not None:
                    p[f"p{q}"] = round(value, 1)
        else:
            p = exact.get(name, {})
        stats.append(
            ToolStats(
                function_name=name,
                calls=t.calls,
                errors=t.errors,
                missing_responses=t.missing,
                avg_response_bytes=t.bytes_sum / t.bytes_n if t.bytes_n else None,
                avg_response_tokens=t.tokens_sum / t.tokens_n if t.tokens_n else None,
                last_seen=t.last_at,
                p50_ms=p.get("p50"),
                p95_ms=p.get("p95"),
                timed_calls=int(p.get("timed", t.timed)),
                approximate=approximate,
            )
        )
    return stats


def tool_stats_from_rows(
    project_id: int,
    function_name: str | None = None,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[ToolStats]:
    """The same statistics by scanning the rows (two queries): what the roll-ups must equal."""
    period = _period(since, until)
    percentiles = _percentiles(project_id, function_name, period)
    stats = []
    for row in _aggregates_from_rows(project_id, function_name, period):
        p = percentiles.get(row.function_name, {})
        stats.append(
            ToolStats(
                function_name=row.function_name,
                calls=as_int(row.calls),
                errors=as_int(row.errors),
                missing_responses=as_int(row.missing),
                avg_response_bytes=float(row.avg_bytes) if row.avg_bytes is not None else None,
                avg_response_tokens=float(row.avg_tokens) if row.avg_tokens is not None else None,
                last_seen=row.last_seen,
                p50_ms=p.get("p50"),
                p95_ms=p.get("p95"),
                timed_calls=int(p.get("timed", 0)),
            )
        )
    return stats


@dataclass(frozen=True, slots=True)
class ToolConversation:
    conversation_id: int
    external_id: str
    title: str
    calls: int
    errors: int
    last_used: datetime


# The conversations of the tool usage page are found among this many of the tool's calls, the
# most recent (before the cursor): the page reads at most these, whatever the tool's number of
# calls (issue 24: grouping all of them grew x3 on SQLite, x5 on PostgreSQL, 100k to 1M calls).
RECENT_CALLS = 5_000
# A cursor's id above any conversation's: the next page starts with the calls at its time.
_AFTER_EVERY_ID = 2**31 - 1  # conversation.id is a 32-bit column


def conversations_using(
    project_id: int,
    function_name: str,
    after: tuple[datetime, int] | None,
    limit: int,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[list[ToolConversation], tuple[datetime, int] | None]:
    """The most recent conversations that called ``function_name``, most recent use first
    (keyset paged), in one statement: they are those of the tool's ``RECENT_CALLS`` most recent
    calls (from the cursor on), walked from the index (project_id, function_name, created_at,
    id); each one's calls and errors are then counted over its own calls only. With
    ``since``/``until``, only its calls made in [since, until) count. Returns the page and
    the cursor of the next one (None at the end)."""
    recent = (
        select(T.created_at, Message.conversation_id.label("conversation_id"))
        .join(Message, Message.id == T.message_id)
        .where(T.project_id == project_id, T.function_name == function_name)
        .where(Message.conversation_id.is_not(None), *_period(since, until))
    )
    if after is not None:
        recent = recent.where(T.created_at <= after[0])
    recent_calls = (
        recent.order_by(T.created_at.desc(), T.id.desc()).limit(RECENT_CALLS).subquery("recent")
    )
    seen = func.max(recent_calls.c.created_at)
    candidates = select(recent_calls.c.conversation_id, seen.label("seen")).group_by(
        recent_calls.c.conversation_id
    )
    if after is not None:
        candidates = candidates.having(
            after_key((seen, recent_calls.c.conversation_id), after, descending=True)
        )
    chosen = (
        candidates.order_by(seen.desc(), recent_calls.c.conversation_id.desc())
        .limit(limit + 1)
        .subquery("chosen")
    )
    # The chosen conversations' calls of the tool, read through their messages (``+ 0`` keeps
    # the planner off the project's index, which would read every call of the tool).
    last_used = func.max(T.created_at)
    stmt = (
        select(
            Conversation.id,
            Conversation.external_id,
            Conversation.title,
            func.count().label("calls"),
            func.sum(case((T.is_error, 1), else_=0)).label("errors"),
            last_used.label("last_used"),
        )
        .select_from(chosen)
        .join(Conversation, Conversation.id == chosen.c.conversation_id)
        .join(Message, Message.conversation_id == chosen.c.conversation_id)
        .join(T, T.message_id == Message.id)
        .where(T.project_id + 0 == project_id, T.function_name == function_name)
        .where(*_period(since, until))
        .group_by(Conversation.id, Conversation.external_id, Conversation.title)
    )
    if after is not None:
        # A conversation also used after the cursor was on an earlier page.
        stmt = stmt.having(after_key((last_used, Conversation.id), after, descending=True))
    rows = db.session.execute(
        stmt.order_by(last_used.desc(), Conversation.id.desc()).limit(limit + 1)
    ).all()
    items = [
        ToolConversation(
            conversation_id=r.id,
            external_id=r.external_id,
            title=r.title or "",
            calls=as_int(r.calls),
            errors=as_int(r.errors),
            last_used=r.last_used,
        )
        for r in rows[:limit]
    ]
    if len(rows) > limit:
        return items, (items[-1].last_used, items[-1].conversation_id)
    # The walk stopped at RECENT_CALLS calls (all of conversations shown already, perhaps):
    # the next page walks on from the oldest of them.
    walked, oldest = db.session.execute(
        select(func.count(), func.min(recent_calls.c.created_at)).select_from(recent_calls)
    ).one()
    if walked < RECENT_CALLS or oldest is None:
        return items, None
    if items and items[-1].last_used <= oldest:
        return items, (items[-1].last_used, items[-1].conversation_id)
    following = (oldest, _AFTER_EVERY_ID)
    if after is not None and following >= after:
        # More than RECENT_CALLS calls of shown conversations at one same instant: no way on.
        return items, None
    return items, following
