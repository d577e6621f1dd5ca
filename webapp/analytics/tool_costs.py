"""Which tool makes the agent expensive: re-send attribution over conversations.

Pure module. :func:`webapp.analytics.context.conversation_context` says, per tool result, which
service call asked for it and for how many later runs replay keeps it;
:func:`webapp.analytics.attribution.attribute` turns that into input tokens and cost per tool.

Billed where it can be, estimated where it must be. A service call whose usage the provider
reported and whose cost was stored shares the input part of that billed cost
(:func:`billed_inputs`) over the tokens of its context: each token costs
``input cost / max(reported input, counted context)``, so the results of one call never cost
more than its input was billed, and never more than their share of the context. A call without
reported usage or a stored cost is priced at the uncached list price of one input token of its
model on its day (:class:`InputPrices`, project overrides first): an estimate, kept apart in
:attr:`~webapp.analytics.attribution.ToolAttribution.estimated_cost_usd`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_DOWN, Decimal

from ..pricing import PriceOverride, cost_for, input_price_per_token
from ..replay.history import History
from .attribution import ServiceCall, ToolAttribution, ToolResult, attribute, attribute_by_bucket
from .context import ContextBar, ConversationContext
from .records import ServiceCallCost

__all__ = [
    "BilledInput",
    "InputPrices",
    "attribution_by_hour",
    "attribution_turns",
    "billed_inputs",
    "femto",
    "from_femto",
    "merge_attributions",
    "tool_attribution",
]

# (assistant message row id, round index): one service call.
CallKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class BilledInput:
    """What a service call's input was billed, and how many input tokens the provider reported."""

    input_usd: Decimal
    input_tokens: int


class InputPrices:
    """Input USD per token by (model, provider, day), looked up once each."""

    def __init__(
        self,
        overrides: Mapping[str, PriceOverride] | None = None,
        providers: Mapping[tuple[int, int], str | None] | None = None,
    ) -> None:
        self.overrides = overrides or {}
        # (message row id, round index) -> provider, from the stored service calls.
        self.providers = providers or {}
        self.memo: dict[tuple[str, str | None, object], Decimal | None] = {}

    def for_bar(self, bar: ContextBar) -> Decimal | None:
        if not bar.model:
            return None
        provider = self.providers.get((bar.message_row_id, bar.round_index))
        return self.lookup(bar.model, provider, bar.created_at)

    def lookup(self, model: str, provider: str | None, at: datetime | None) -> Decimal | None:
        key = (model, provider, at.date() if at else None)
        if key not in self.memo:
            self.memo[key] = input_price_per_token(model, provider, at, self.overrides)
        return self.memo[key]

    def input_share(
        self,
        model: str | None,
        provider: str | None,
        at: datetime | None,
        tokens: tuple[int, int, int],
    ) -> Decimal:
        """Which part of a call's total cost its input was, at today's prices for that day
        (stored costs are totals): 1 when that cannot be told, which only overstates the bound.
        ``tokens``: reported (input, output, cached)."""
        input_tokens, output_tokens, cached_tokens = tokens
        if not model:
            return Decimal(1)
        try:
            cost = cost_for(
                model, provider, input_tokens, output_tokens, min(cached_tokens, input_tokens),
                at=at, overrides=self.overrides,
            )  # fmt: skip
        except ValueError:
            return Decimal(1)
        if cost is None or cost.total_usd <= 0:
            return Decimal(1)
        return min(Decimal(1), cost.input_usd / cost.total_usd)


def billed_inputs(
    history: History, costs: Iterable[ServiceCallCost], prices: InputPrices
) -> dict[CallKey, BilledInput]:
    """Per service call with reported input tokens and a stored cost: the input part of that
    billed cost."""
    usage = {(m.row_id, s.round_index): s for m in history.messages for s in m.service_calls}
    billed: dict[CallKey, BilledInput] = {}
    for cost in costs:
        key = (cost.message_row_id, cost.round_index)
        reported = usage.get(key)
        if cost.cost_usd is None or reported is None or not reported.input_tokens:
            continue
        share = prices.input_share(
            reported.model,
            cost.provider,
            reported.created_at,
            (reported.input_tokens, reported.output_tokens or 0, reported.cached_tokens or 0),
        )
        billed[key] = BilledInput(cost.cost_usd * share, reported.input_tokens)
    return billed


def attribution_turns(
    ctx: ConversationContext,
    prices: InputPrices,
    billed: Mapping[CallKey, BilledInput] | None = None,
    period: tuple[datetime, datetime] | None = None,
) -> list[list[ServiceCall]]:
    """The conversation as :func:`.attribution.attribute` takes it: runs of service calls, each
    with its price (a share of its billed input where ``billed`` has it, else the list price)
    and the results it asked for. With a ``period`` (start, end), calls outside it carry
    results but add nothing."""
    billed = billed or {}
    bars_by_run = _bars_by_run(ctx)
    results: dict[tuple[int, int], list[ToolResult]] = {}
    for r in ctx.results:
        results.setdefault((r.run, r.call_position), []).append(
            ToolResult(
                function_name=r.function_name,
                result_tokens=r.tokens,
                later_turns=r.later_runs,
                replayed_tokens=r.replayed_tokens,
            )
        )

    def service_call(run: int, position: int, bar: ContextBar) -> ServiceCall:
        counted = period is None or (
            bar.created_at is not None and period[0] <= bar.created_at < period[1]
        )
        paid = billed.get((bar.message_row_id, bar.round_index))
        if paid is not None:
            price = paid.input_usd / max(paid.input_tokens, bar.total)
        else:
            price = prices.for_bar(bar)
        return ServiceCall(
            input_usd_per_token=price,
            results=results.get((run, position), ()),
            model=bar.model,
            billed=paid is not None,
            counted=counted,
        )

    return [
        [service_call(run, position, bar) for position, bar in enumerate(bars)]
        for run, bars in enumerate(bars_by_run)
    ]


def _bars_by_run(ctx: ConversationContext) -> list[list[ContextBar]]:
    """The context's service calls per run (turn), in order."""
    bars_by_run: list[list[ContextBar]] = [[] for _ in range(ctx.runs)]
    for bar in ctx.bars:
        bars_by_run[bar.run].append(bar)
    return bars_by_run


def tool_attribution(
    ctx: ConversationContext,
    prices: InputPrices,
    billed: Mapping[CallKey, BilledInput] | None = None,
    period: tuple[datetime, datetime] | None = None,
) -> dict[str, ToolAttribution]:
    """Per function name: results, tokens, re-sends and the input cost they caused."""
    return attribute(attribution_turns(ctx, prices, billed, period))


def attribution_by_hour(
    ctx: ConversationContext,
    prices: InputPrices,
    billed: Mapping[CallKey, BilledInput] | None = None,
) -> dict[datetime, dict[str, ToolAttribution]]:
    """:func:`tool_attribution` split by the UTC hour of the service calls that count: per hour
    with a timed call, the attribution with that hour as the period. The rule is linear in its
    counted calls, so the pieces of the hours in a range add up to the range's attribution (a
    tool is listed when a piece of it is; calls without a time never count). All hours in one
    pass (:func:`.attribution.attribute_by_bucket`), in the order of the hours."""
    hours = [
        [None if b.created_at is None else _hour(b.created_at) for b in bars]
        for bars in _bars_by_run(ctx)
    ]
    pieces = attribute_by_bucket(attribution_turns(ctx, prices, billed), hours)
    return {h: pieces[h] for h in sorted(pieces) if pieces[h]}


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


# Stored pieces keep costs in femto-USD, rounded down: six digits finer than the nine decimals
# the chart shows, so that their sum rounds to what the exact sum does.
_FEMTO = Decimal(10) ** 15


def femto(usd: Decimal) -> int:
    """``usd`` in femto-USD, rounded down."""
    return int((usd * _FEMTO).to_integral_value(ROUND_DOWN))


def from_femto(amount: int) -> Decimal:
    return Decimal(amount) / _FEMTO


# Stored costs have nine decimals; shares of them are rounded down to as many.
_NANO_USD = Decimal("0.000000001")


def _nano(usd: Decimal) -> Decimal:
    """``usd`` rounded down to nine decimals, without trailing zeros (and never as 1E+1)."""
    rounded = usd.quantize(_NANO_USD, ROUND_DOWN).normalize()
    return rounded.quantize(Decimal(1)) if rounded.as_tuple().exponent > 0 else rounded  # type: ignore[operator]


def merge_attributions(parts: Iterable[Mapping[str, ToolAttribution]]) -> list[ToolAttribution]:
    """Sum per-conversation attributions per tool, most expensive first (then most tokens);
    costs rounded down to nine decimals, as stored costs are."""
    totals: dict[str, ToolAttribution] = {}
    for part in parts:
        for name, a in part.items():
            t = totals.setdefault(name, ToolAttribution(name))
            t.results += a.results
            t.result_tokens += a.result_tokens
            t.sends += a.sends
            t.resent_input_tokens += a.resent_input_tokens
            t.attributed_cost_usd += a.attributed_cost_usd
            t.unpriced_input_tokens += a.unpriced_input_tokens
            t.estimated_cost_usd += a.estimated_cost_usd
    for t in totals.values():
        t.attributed_cost_usd = _nano(t.attributed_cost_usd)
        t.estimated_cost_usd = _nano(t.estimated_cost_usd)
    return sorted(
        totals.values(),
        key=lambda a: (-a.attributed_cost_usd, -a.resent_input_tokens, a.function_name),
    )
