"""The records the charts are drawn from: daily series, result sizes, conversations with their
stored counts and costs. Plain data; ``webapp.queries.analytics`` and ``webapp.queries.histories``
fill them from the database, the pure chart builders read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from ..replay.history import History
from .context import StoredCounts

# Result-size percentiles the tools chart shows (nearest rank).
PERCENTILES = (25, 50, 75, 90)


@dataclass(frozen=True, slots=True)
class DailyUsage:
    day: date
    service_calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: Decimal
    unpriced_calls: int  # service calls without a stored cost (unknown model or usage)


@dataclass(frozen=True, slots=True)
class DailyToolActivity:
    day: date
    function_name: str
    calls: int
    errors: int
    responses: int
    result_tokens: int


@dataclass(frozen=True, slots=True)
class ResultSizes:
    """Distribution of one tool's result sizes in tokens (nearest-rank percentiles)."""

    function_name: str
    results: int
    mean: float
    minimum: int
    maximum: int
    percentiles: dict[int, int] = field(default_factory=dict)
    # Minimum, maximum and percentiles from the roll-ups' sketches (within 1 %), not the rows.
    approximate: bool = False


@dataclass(frozen=True, slots=True)
class ServiceCallCost:
    """The cost stored with one service call at ingestion, and the price that produced it."""

    message_row_id: int
    round_index: int
    provider: str | None
    cost_usd: Decimal | None
    price_source: str | None
    price_version: str | None


@dataclass(frozen=True, slots=True)
class LoadedConversation:
    """A conversation as the analytics need it: replay input, stored counts, stored costs."""

    id: int
    external_id: str
    title: str
    freshness_seconds: int | None  # channel override, else the project's window
    history: History
    counts: StoredCounts
    costs: tuple[ServiceCallCost, ...]
