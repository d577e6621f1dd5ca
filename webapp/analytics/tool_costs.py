"""Which tool makes the agent expensive: re-send attribution over conversations.

Pure module. :func:`webapp.analytics.context.conversation_context` says, per tool result, which
service call asked for it and for how many later runs replay keeps it;
:func:`webapp.analytics.attribution.attribute` turns that into input tokens and cost per tool. Each
service call is priced at the uncached list price of one input token of its model on its day
(:class:`InputPrices`, project overrides first), because stored costs are totals and do not
say what one more input token cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from decimal import Decimal

from ..pricing import PriceOverride, input_price_per_token
from .attribution import ServiceCall, ToolAttribution, ToolResult, attribute
from .context import ContextBar, ConversationContext

__all__ = ["InputPrices", "attribution_turns", "merge_attributions", "tool_attribution"]


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


def attribution_turns(ctx: ConversationContext, prices: InputPrices) -> list[list[ServiceCall]]:
    """The conversation as :func:`.attribution.attribute` takes it: runs of service calls, each
    with its price and the results it asked for."""
    bars_by_run: list[list[ContextBar]] = [[] for _ in range(ctx.runs)]
    for bar in ctx.bars:
        bars_by_run[bar.run].append(bar)
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
    return [
        [
            ServiceCall(
                input_usd_per_token=prices.for_bar(bar),
                results=results.get((run, position), ()),
                model=bar.model,
            )
            for position, bar in enumerate(bars)
        ]
        for run, bars in enumerate(bars_by_run)
    ]


def tool_attribution(ctx: ConversationContext, prices: InputPrices) -> dict[str, ToolAttribution]:
    """Per function name: results, tokens, re-sends and the input cost they caused."""
    return attribute(attribution_turns(ctx, prices))


def merge_attributions(parts: Iterable[Mapping[str, ToolAttribution]]) -> list[ToolAttribution]:
    """Sum per-conversation attributions per tool, most expensive first (then most tokens)."""
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
    return sorted(
        totals.values(),
        key=lambda a: (-a.attributed_cost_usd, -a.resent_input_tokens, a.function_name),
    )
