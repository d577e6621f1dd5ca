"""What a roll-up row holds, and the duration and result-size sketches in it.

Pure module. The roll-ups (``tool_rollup``, ``model_rollup``, written by
``webapp.ingest.rollups``, read by ``webapp.queries.rollups``) are sums per project, name and
time bucket (an hour and a UTC day: every row counts in one bucket of each span). This module
says what one tool call or one service call adds to its bucket (:func:`call_part`,
:func:`usage_part`), so the write paths, the migration's backfill, the reads of a range's
partial edges and the drift test all count the same way.

Percentiles come from DDSketch (the ``ddsketch`` package, Datadog's reference implementation):
a value is kept as the count of its logarithmic bin (``LogarithmicMapping``, 1 % relative
accuracy), so sketches merge by adding counts. A roll-up row stores its bins as integer counts
(:class:`Bins`); a delete subtracts exactly what the insert added (DDSketch itself only adds),
and a read merges the rows' bins and asks a ``DDSketch`` filled from them for its quantiles: a
quantile is within 1 % of the value at the same rank of the exact data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

__all__ = [
    "DAY",
    "HOUR",
    "RELATIVE_ACCURACY",
    "SPANS",
    "Bins",
    "CallPart",
    "UsagePart",
    "bucket_start",
    "call_part",
    "quantile",
    "quantiles",
    "usage_part",
]

RELATIVE_ACCURACY = 0.01
HOUR = 3600
DAY = 86400
SPANS = (HOUR, DAY)
# Calls whose content the OTLP instrumentation did not record have no response and none is
# missing (webapp.sql.CONTENT_NOT_CAPTURED, repeated here: this module imports no database).
CONTENT_NOT_CAPTURED = "otlp:content_not_captured"
NANO = Decimal("1e9")

_MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def bucket_start(at: datetime, span: int) -> datetime:
    """The first instant (UTC) of the ``span``-second bucket holding ``at``."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    elif at.utcoffset():
        at = at.astimezone(UTC)
    if span == HOUR:
        return at.replace(minute=0, second=0, microsecond=0, tzinfo=UTC)
    if span == DAY:
        return at.replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=UTC)
    seconds = int((at - _EPOCH).total_seconds() // span) * span
    return _EPOCH + timedelta(seconds=seconds)


class Bins:
    """A DDSketch's bins as signed integer counts: positive values by key, negative values by
    key, and zeros. Adding and subtracting are exact; ``encode`` is the stored text."""

    __slots__ = ("neg", "pos", "zero")

    def __init__(self) -> None:
        self.pos: dict[int, int] = {}
        self.neg: dict[int, int] = {}
        self.zero = 0

    def add(self, value: float, weight: int = 1) -> None:
        if value > _MAPPING.min_possible:
            key = _MAPPING.key(value)
            self.pos[key] = self.pos.get(key, 0) + weight
        elif value < -_MAPPING.min_possible:
            key = _MAPPING.key(-value)
            self.neg[key] = self.neg.get(key, 0) + weight
        else:
            self.zero += weight

    def merge(self, other: Bins, sign: int = 1) -> None:
        for mine, theirs in ((self.pos, other.pos), (self.neg, other.neg)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + sign * count
        self.zero += sign * other.zero

    @property
    def count(self) -> int:
        return sum(self.pos.values()) + sum(self.neg.values()) + self.zero

    # Stored as JSON: {"p": {"<key>": count, ...}, "n": {...}, "z": zeros}, empty parts left
    # out. Objects, so that a write adds its few bins to the stored document without a
    # Python loop over all of them (orjson parses and writes the rest).

    def encode(self) -> str | None:
        """The stored text (keys sorted: equal sketches, equal texts)."""
        doc: dict[str, Any] = {}
        for name, bins in (("p", self.pos), ("n", self.neg)):
            kept = {str(k): c for k, c in bins.items() if c}
            if kept:
                doc[name] = kept
        if self.zero:
            doc["z"] = self.zero
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode() if doc else None

    def add_to_text(self, text: str | None) -> str | None:
        """The stored text ``text`` with these counts added (the write path's step)."""
        if not text:
            return self.encode()
        doc = orjson.loads(text)
        for name, bins in (("p", self.pos), ("n", self.neg)):
            if not bins:
                continue
            stored = doc.setdefault(name, {})
            for key, count in bins.items():
                if count:
                    k = str(key)
                    total = stored.get(k, 0) + count
                    if total:
                        stored[k] = total
                    else:
                        del stored[k]
            if not stored:
                del doc[name]
        zero = doc.get("z", 0) + self.zero
        if zero:
            doc["z"] = zero
        else:
            doc.pop("z", None)
        return orjson.dumps(doc).decode() if doc else None

    @classmethod
    def decode(cls, text: str | None) -> Bins:
        out = cls()
        out.merge_text(text)
        return out

    def merge_text(self, text: str | None) -> None:
        """Add a stored sketch's counts."""
        self.merge_texts((text,))

    def merge_texts(self, texts: Iterable[str | None]) -> None:
        """Add the counts of many stored sketches (a read merging roll-up rows). The keys stay
        text while the rows are summed and become integers once at the end: half the time of
        converting every key of every row (a day of hourly rows of 30 tools at a million calls
        holds ~150,000 bins)."""
        parts: tuple[dict[str, int], dict[str, int]] = ({}, {})
        zero = 0
        loads = orjson.loads
        for text in texts:
            if not text:
                continue
            doc = loads(text)
            for name, target in zip(("p", "n"), parts, strict=True):
                stored = doc.get(name)
                if stored:
                    get = target.get
                    for key, count in stored.items():
                        target[key] = get(key, 0) + count
            zero += doc.get("z", 0)
        for summed, target in zip(parts, (self.pos, self.neg), strict=True):
            get = target.get
            for key, count in summed.items():
                k = int(key)
                target[k] = get(k, 0) + count
        self.zero += zero

    def sketch(self) -> DDSketch:
        """A DDSketch holding these counts (each bin's value added with its count)."""
        s = DDSketch(RELATIVE_ACCURACY)
        for key, count in self.pos.items():
            if count > 0:
                s.add(_MAPPING.value(key), count)
        for key, count in self.neg.items():
            if count > 0:
                s.add(-_MAPPING.value(key), count)
        if self.zero > 0:
            s.add(0.0, self.zero)
        return s


def quantile(bins: Bins, q: float) -> float | None:
    """The value at quantile ``q`` (0..1) of the sketch, None when it is empty."""
    return quantiles(bins, (q,))[0]


def quantiles(bins: Bins, qs: Iterable[float]) -> list[float | None]:
    """``DDSketch.get_quantile_value`` of ``bins.sketch()`` for each of ``qs``, read from the
    bins directly: filling a ``DDSketch`` adds each bin's value one by one in Python, ~1.5 ms
    for a sketch of 500 bins, and a tools page asks for one per tool and measure (at a million
    calls most of `/tools?range=24h`'s time). The walk is DDSketch's own (its stores'
    ``key_at_rank``); tests/test_analytics_sketch_reads.py proves the same answers."""
    pos = sorted((k, c) for k, c in bins.pos.items() if c > 0)
    neg = sorted((k, c) for k, c in bins.neg.items() if c > 0)
    zero = bins.zero if bins.zero > 0 else 0
    neg_count = sum(c for _, c in neg)
    total = neg_count + zero + sum(c for _, c in pos)
    out: list[float | None] = []
    for q in qs:
        if q < 0 or q > 1 or total == 0:
            out.append(None)
            continue
        rank = q * (total - 1)
        if rank < neg_count:
            key = _key_at_rank(neg, neg_count - rank - 1, lower=False)
            out.append(-_MAPPING.value(_MAPPING.key(_MAPPING.value(key))))
        elif rank < zero + neg_count:
            out.append(0)
        else:
            key = _key_at_rank(pos, rank - zero - neg_count, lower=True)
            out.append(_MAPPING.value(_MAPPING.key(_MAPPING.value(key))))
    return out


def _key_at_rank(bins: list[tuple[int, int]], rank: float, *, lower: bool) -> int:
    """``DenseStore.key_at_rank`` over ``(key, count)`` pairs in key order. The key is given
    back through the mapping's value (``mapping.key(mapping.value(key))``), as the sketch
    stores each bin's value under the key it maps to."""
    running = 0
    for key, count in bins:
        running += count
        if (lower and running > rank) or (not lower and running >= rank + 1):
            return key
    return bins[-1][0]


@dataclass(slots=True)
class CallPart:
    """What tool calls add to one tool roll-up row (negative when they are taken away)."""

    calls: int = 0
    errors: int = 0
    responses: int = 0
    missing: int = 0
    bytes_n: int = 0
    bytes_sum: int = 0
    tokens_n: int = 0
    tokens_sum: int = 0
    timed: int = 0
    durations: Bins = field(default_factory=Bins)
    sizes: Bins = field(default_factory=Bins)
    # The newest created_at added; whether a call was taken away (the newest is then read
    # again from the rows when the delta is written).
    last_at: datetime | None = None
    removed: bool = False

    def merge(self, other: CallPart, sign: int = 1) -> None:
        self.calls += sign * other.calls
        self.errors += sign * other.errors
        self.responses += sign * other.responses
        self.missing += sign * other.missing
        self.bytes_n += sign * other.bytes_n
        self.bytes_sum += sign * other.bytes_sum
        self.tokens_n += sign * other.tokens_n
        self.tokens_sum += sign * other.tokens_sum
        self.timed += sign * other.timed
        self.durations.merge(other.durations, sign)
        self.sizes.merge(other.sizes, sign)
        if sign < 0 or other.removed:
            self.removed = True
        newer = other.last_at is not None and (self.last_at is None or other.last_at > self.last_at)
        if sign > 0 and newer:
            self.last_at = other.last_at


# The tool_invocation columns call_part reads, by name.
CALL_COLUMNS = (
    "project_id",
    "function_name",
    "created_at",
    "is_error",
    "response",
    "redactions",
    "response_bytes",
    "response_tokens",
    "started_at",
    "ended_at",
)


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def duration_of(started: datetime | None, ended: datetime | None) -> float | None:
    if started is None or ended is None:
        return None
    return (_utc(ended) - _utc(started)).total_seconds() * 1000.0


def call_part(row: Mapping[str, Any], *, has_response: bool | None = None) -> CallPart:
    """One call's part of its bucket. ``row`` has the columns of CALL_COLUMNS (``response``
    may be left out when ``has_response`` says whether there is one)."""
    part = CallPart()
    add_row(part, row, has_response=has_response)
    return part


def add_row(
    part: CallPart, row: Mapping[str, Any], *, has_response: bool | None = None, sign: int = 1
) -> None:
    """Add (``sign`` 1) or take away (-1) one call's part to ``part``, in place: what
    ``call_part`` returns, without a part per call (the write path's loop)."""
    responded = row["response"] is not None if has_response is None else has_response
    part.calls += sign
    if row["is_error"]:
        part.errors += sign
    if responded:
        part.responses += sign
    elif CONTENT_NOT_CAPTURED not in (row["redactions"] or ()):
        part.missing += sign
    size = row["response_bytes"]
    if size is not None:
        part.bytes_n += sign
        part.bytes_sum += sign * int(size)
    tokens = row["response_tokens"]
    if tokens is not None:
        part.tokens_n += sign
        part.tokens_sum += sign * int(tokens)
        part.sizes.add(float(tokens), sign)
    started, ended = row["started_at"], row["ended_at"]
    if started is not None and ended is not None:
        part.timed += sign
        part.durations.add((_utc(ended) - _utc(started)).total_seconds() * 1000.0, sign)
    at = _utc(row["created_at"])
    if sign < 0:
        part.removed = True
    elif part.last_at is None or at > part.last_at:
        part.last_at = at


@dataclass(slots=True)
class UsagePart:
    """What service calls add to one model roll-up row."""

    service_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost_nano: int = 0  # USD times 10^9: stored costs have nine decimals, so sums stay exact
    unpriced: int = 0

    def merge(self, other: UsagePart, sign: int = 1) -> None:
        self.service_calls += sign * other.service_calls
        self.input_tokens += sign * other.input_tokens
        self.output_tokens += sign * other.output_tokens
        self.cached_tokens += sign * other.cached_tokens
        self.cost_nano += sign * other.cost_nano
        self.unpriced += sign * other.unpriced

    @property
    def cost_usd(self) -> Decimal:
        return Decimal(self.cost_nano) / NANO


def cost_nano(cost: Any) -> int:
    return int((Decimal(str(cost)) * NANO).to_integral_value())


def usage_part(row: Mapping[str, Any]) -> UsagePart:
    """One service call's part: ``row`` has input/output/cached tokens and cost_usd."""
    cost = row["cost_usd"]
    return UsagePart(
        service_calls=1,
        input_tokens=int(row["input_tokens"] or 0),
        output_tokens=int(row["output_tokens"] or 0),
        cached_tokens=int(row["cached_tokens"] or 0),
        cost_nano=cost_nano(cost) if cost is not None else 0,
        unpriced=1 if cost is None else 0,
    )


def usage_time(row: Mapping[str, Any]) -> datetime:
    """A service call's moment: its own, else its message's (as the cost chart dates it)."""
    return _utc(row["created_at"] or row.get("message_created_at"))


def model_key(model: str | None) -> str:
    return model or ""


def split_range(
    since: datetime | None, until: datetime | None
) -> tuple[list[tuple[int, datetime | None, datetime | None]], list[tuple[datetime, datetime]]]:
    """How a read covers [since, until): whole buckets of each span as (span, from, to) ranges
    of bucket starts (None: open), and the partial edges as (from, to) instants read from the
    rows. Days where whole days fit, hours at the edges, rows for what is left of an hour."""
    if since is None and until is None:
        return [(DAY, None, None)], []
    whole: list[tuple[int, datetime | None, datetime | None]] = []
    edges: list[tuple[datetime, datetime]] = []

    def up(at: datetime, span: int) -> datetime:
        start = bucket_start(at, span)
        return start if start == _utc(at) else start + timedelta(seconds=span)

    lo = _utc(since) if since is not None else None
    hi = _utc(until) if until is not None else None
    if lo is not None and hi is not None and hi <= lo:
        return [], []
    if lo is None:
        assert hi is not None
        day_hi = bucket_start(hi, DAY)
        hour_hi = bucket_start(hi, HOUR)
        whole.append((DAY, None, day_hi))
        if hour_hi > day_hi:
            whole.append((HOUR, day_hi, hour_hi))
        if hi > hour_hi:
            edges.append((hour_hi, hi))
        return whole, edges
    hour_lo = up(lo, HOUR)
    if hi is not None and hour_lo >= hi:
        return [], [(lo, hi)]
    if hour_lo > lo:
        edges.append((lo, hour_lo))
    day_lo = up(hour_lo, DAY)
    if hi is None:
        if day_lo > hour_lo:
            whole.append((HOUR, hour_lo, day_lo))
        whole.append((DAY, day_lo, None))
        return whole, edges
    hour_hi = bucket_start(hi, HOUR)
    day_hi = bucket_start(hour_hi, DAY)
    if day_lo < day_hi:
        if day_lo > hour_lo:
            whole.append((HOUR, hour_lo, day_lo))
        whole.append((DAY, day_lo, day_hi))
        if hour_hi > day_hi:
            whole.append((HOUR, day_hi, hour_hi))
    elif hour_hi > hour_lo:
        whole.append((HOUR, hour_lo, hour_hi))
    if hi > hour_hi:
        edges.append((max(hour_hi, lo), hi))
    return whole, edges


def merge_parts(parts: Iterable[tuple[Any, CallPart]]) -> dict[Any, CallPart]:
    out: dict[Any, CallPart] = {}
    for key, part in parts:
        mine = out.get(key)
        if mine is None:
            out[key] = mine = CallPart()
        mine.merge(part)
    return out
