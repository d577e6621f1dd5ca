"""Reads of the roll-ups (``tool_rollup``, ``model_rollup``): sums over a time range per tool,
per day and tool, and per day, whatever the number of calls.

A range is covered by whole buckets where they fit (UTC days, then hours at the edges,
``webapp.analytics.rollups.split_range``) and, for what is left of an hour at either edge, by
the rows themselves, counted the way the roll-ups count them (``call_part``, ``usage_part``):
so a range that starts at 14:37 gives the same figures as the rows would, reading at most an
hour of calls at each end. "All time" reads the daily roll-ups only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import and_, false, func, or_, select

from ..analytics.rollups import (
    Bins,
    CallPart,
    UsagePart,
    call_part,
    split_range,
    usage_part,
    usage_time,
)
from ..db import db
from ..models import Message, ModelRollup, ServiceCall, ToolRollup
from ..models import ToolInvocation as T
from ..sql import as_int

# The merged sketches a read can ask tool_totals for.
SKETCHES = ("durations", "sizes")

R = ToolRollup
M = ModelRollup

__all__ = ["ToolTotals", "daily_tool_parts", "daily_usage_parts", "tool_totals"]


@dataclass(slots=True)
class ToolTotals:
    """One tool's sums over a range, and (when asked for) its merged sketches."""

    calls: int = 0
    errors: int = 0
    responses: int = 0
    missing: int = 0
    bytes_n: int = 0
    bytes_sum: int = 0
    tokens_n: int = 0
    tokens_sum: int = 0
    timed: int = 0
    last_at: datetime | None = None
    durations: Bins = field(default_factory=Bins)
    sizes: Bins = field(default_factory=Bins)

    def add_part(self, part: CallPart, sketches: Sequence[str]) -> None:
        self.calls += part.calls
        self.errors += part.errors
        self.responses += part.responses
        self.missing += part.missing
        self.bytes_n += part.bytes_n
        self.bytes_sum += part.bytes_sum
        self.tokens_n += part.tokens_n
        self.tokens_sum += part.tokens_sum
        self.timed += part.timed
        self._newest(part.last_at)
        for name in sketches:
            getattr(self, name).merge(getattr(part, name))

    def _newest(self, at: datetime | None) -> None:
        if at is not None:
            at = _aware(at)
            if self.last_at is None or at > self.last_at:
                self.last_at = at


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _whole(table: Any, segments: Iterable[tuple[int, datetime | None, datetime | None]]) -> Any:
    """The condition selecting the roll-up rows of whole buckets."""
    parts = []
    for span, lo, hi in segments:
        conditions = [table.span == span]
        if lo is not None:
            conditions.append(table.bucket >= lo)
        if hi is not None:
            conditions.append(table.bucket < hi)
        parts.append(and_(*conditions))
    return or_(*parts) if parts else false()


_CALL_FACTS = (
    T.function_name,
    T.created_at,
    T.is_error,
    T.response.is_not(None).label("has_response"),
    T.redactions,
    T.response_bytes,
    T.response_tokens,
    T.started_at,
    T.ended_at,
)


def _edge_calls(
    project_id: int, edges: list[tuple[datetime, datetime]], function_name: str | None
) -> list[tuple[str, CallPart]]:
    """The calls of the partial edges (less than an hour each), as roll-up parts."""
    parts = []
    for lo, hi in edges:
        stmt = select(*_CALL_FACTS).where(
            T.project_id == project_id, T.created_at >= lo, T.created_at < hi
        )
        if function_name is not None:
            stmt = stmt.where(T.function_name == function_name)
        for row in db.session.execute(stmt):
            m = row._mapping
            part = call_part(m, has_response=m["has_response"])
            parts.append((m["function_name"], part))
    return parts


_SUMS = ("calls", "errors", "responses", "missing", "bytes_n", "bytes_sum", "tokens_n")
_SUMS += ("tokens_sum", "timed")


def tool_totals(
    project_id: int,
    since: datetime | None,
    until: datetime | None,
    function_name: str | None = None,
    *,
    sketches: Sequence[str] = SKETCHES,
) -> dict[str, ToolTotals]:
    """Per tool, the sums over the calls made in [since, until) (None: open), and the merged
    sketches named in ``sketches`` ("durations", "sizes"): a page reads only the one it shows,
    as merging them is most of the read's time. Two or three statements."""
    whole, edges = split_range(since, until)
    where = [R.project_id == project_id, _whole(R, whole)]
    if function_name is not None:
        where.append(R.function_name == function_name)
    out: dict[str, ToolTotals] = {}
    if whole:
        stmt = (
            select(
                R.function_name,
                *(func.sum(getattr(R, name)).label(name) for name in _SUMS),
                func.max(R.last_at).label("last_at"),
            )
            .where(*where)
            .group_by(R.function_name)
        )
        for row in db.session.execute(stmt):
            t = out[row.function_name] = ToolTotals()
            for name in _SUMS:
                setattr(t, name, as_int(getattr(row, name)))
            t._newest(row.last_at)
        if sketches:
            texts: dict[tuple[str, str], list[str | None]] = {}
            columns = [getattr(R, name) for name in sketches]
            for function_name, *stored in db.session.execute(
                select(R.function_name, *columns).where(*where)
            ):
                for name, text in zip(sketches, stored, strict=True):
                    texts.setdefault((function_name, name), []).append(text)
            for (function_name, name), merged in texts.items():
                getattr(out[function_name], name).merge_texts(merged)
    for name, part in _edge_calls(project_id, edges, function_name):
        t = out.get(name)
        if t is None:
            t = out[name] = ToolTotals()
        t.add_part(part, sketches)
    return {name: t for name, t in out.items() if t.calls > 0}


@dataclass(frozen=True, slots=True)
class DayTool:
    day: date
    function_name: str
    calls: int
    errors: int
    responses: int
    tokens_sum: int


def daily_tool_parts(
    project_id: int, since: datetime, until: datetime, function_name: str | None
) -> list[DayTool]:
    """Per UTC day and tool: calls, errors, responses, result tokens (the error-rate and
    tokens charts), from the roll-ups and the partial edges' rows."""
    whole, edges = split_range(since, until)
    sums: dict[tuple[date, str], list[int]] = {}

    def add(day: date, name: str, calls: int, errors: int, responses: int, tokens: int) -> None:
        s = sums.setdefault((day, name), [0, 0, 0, 0])
        s[0] += calls
        s[1] += errors
        s[2] += responses
        s[3] += tokens

    if whole:
        stmt = select(
            R.bucket, R.function_name, R.calls, R.errors, R.responses, R.tokens_sum
        ).where(R.project_id == project_id, _whole(R, whole))
        if function_name is not None:
            stmt = stmt.where(R.function_name == function_name)
        for row in db.session.execute(stmt):
            add(_aware(row.bucket).date(), row.function_name, row.calls, row.errors,
                row.responses, row.tokens_sum)  # fmt: skip
    for name, part in _edge_calls(project_id, edges, function_name):
        assert part.last_at is not None
        add(part.last_at.date(), name, part.calls, part.errors, part.responses, part.tokens_sum)
    return [
        DayTool(day, name, *values) for (day, name), values in sorted(sums.items()) if values[0]
    ]


def daily_usage_parts(project_id: int, since: datetime, until: datetime) -> dict[date, UsagePart]:
    """Per UTC day: the service calls' usage and cost, from the roll-ups and the edges' rows."""
    whole, edges = split_range(since, until)
    out: dict[date, UsagePart] = {}
    if whole:
        stmt = select(
            M.bucket,
            M.service_calls,
            M.input_tokens,
            M.output_tokens,
            M.cached_tokens,
            M.cost_nano,
            M.unpriced,
        ).where(M.project_id == project_id, _whole(M, whole))
        for row in db.session.execute(stmt):
            day = _aware(row.bucket).date()
            part = out.setdefault(day, UsagePart())
            part.merge(
                UsagePart(
                    row.service_calls,
                    row.input_tokens,
                    row.output_tokens,
                    row.cached_tokens,
                    row.cost_nano,
                    row.unpriced,
                )
            )
    at = func.coalesce(ServiceCall.created_at, Message.created_at)
    for lo, hi in edges:
        stmt = (
            select(
                ServiceCall.model,
                ServiceCall.created_at,
                Message.created_at.label("message_created_at"),
                ServiceCall.input_tokens,
                ServiceCall.output_tokens,
                ServiceCall.cached_tokens,
                ServiceCall.cost_usd,
            )
            .join(Message, Message.id == ServiceCall.message_id)
            .where(
                Message.project_id == project_id,
                Message.conversation_id.is_not(None),
                at >= lo,
                at < hi,
            )
        )
        for row in db.session.execute(stmt):
            m = row._mapping
            out.setdefault(usage_time(m).date(), UsagePart()).merge(usage_part(m))
    return {day: part for day, part in out.items() if part.service_calls}
