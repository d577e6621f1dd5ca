"""Which tools' results drive input-token cost: attribution of re-sent tool results.

Pure module (no Flask, no database).

A tool result is input to every later LLM service call of its turn, and to the service calls of
later turns for as long as the replay keeps it in the history. A 5 000-token search result
returned in round 0 of a 6-round turn is therefore paid for five times within the turn alone.
:func:`attribute` adds that up per function name.

Input, for one conversation, oldest first: a list of **turns**, each a list of its **service
calls** in order (round 0, 1, ..., and the final-text call). Each :class:`ServiceCall` carries

* its input price per token (``input_usd_per_token``), or a ``model`` that the optional
  ``price_for_model`` callable prices; ``None`` means unknown, and tokens sent to such calls are
  counted in :attr:`ToolAttribution.unpriced_input_tokens` instead of in the cost;
* ``results``: the tool results produced by the tool calls *this* service call requested.

A result produced by call ``i`` of a turn is input to calls ``i+1 ...`` of the same turn (none if
``i`` is the last call: a trailing result the model never saw), and to *every* service call of
the next :attr:`ToolResult.later_turns` turns (``0``: the replay drops it; ``None``: all later
turns). That count is the caller's: it is what replay decides (freshness window, persistence
mode, budget), and those rules only ever drop a result for good, never bring it back. In later
turns the result weighs :attr:`ToolResult.replayed_tokens` (after truncation or compaction) when
given, else ``result_tokens``. Leave out results that never got a response.

Price: what one input token cost on that call. Where the provider reported the call's usage
and it was billed, the caller gives the billed input cost shared over the tokens of the call's
context (``billed``), so the results of one call never cost more than its input did; elsewhere
:func:`webapp.pricing.input_price_per_token` gives the uncached list price, and what that prices
is an estimate (:attr:`ToolAttribution.estimated_cost_usd`). A call with ``counted`` false (outside
the period being looked at) carries its results without adding sends, tokens or cost.

Runs in O(service calls + results) using prefix sums, so a 10 000-call conversation is cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import accumulate
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

__all__ = ["ServiceCall", "ToolAttribution", "ToolResult", "attribute", "attribute_by_bucket"]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One tool result, as produced (and sent) within its turn."""

    function_name: str
    result_tokens: int
    later_turns: int | None = 0
    """How many following turns' service calls receive it (0: none, None: all)."""
    replayed_tokens: int | None = None
    """Its size when replayed in later turns, if replay truncated or compacted it."""

    def __post_init__(self) -> None:
        _check_count("result_tokens", self.result_tokens)
        if self.later_turns is not None:
            _check_count("later_turns", self.later_turns)
        if self.replayed_tokens is not None:
            _check_count("replayed_tokens", self.replayed_tokens)


@dataclass(frozen=True, slots=True)
class ServiceCall:
    """One LLM service call (a round, or the final-text call) of a turn."""

    input_usd_per_token: Decimal | None = None
    results: Sequence[ToolResult] = ()
    model: str | None = None
    """Priced by ``attribute(price_for_model=...)`` when ``input_usd_per_token`` is None."""
    billed: bool = False
    """The price is a share of the call's billed input cost, not a list price (an estimate)."""
    counted: bool = True
    """The call is in the period being attributed: what it is sent counts."""


@dataclass(slots=True)
class ToolAttribution:
    """Totals for one function name across the conversation."""

    function_name: str
    results: int = 0
    """How many results it produced."""
    result_tokens: int = 0
    """Their size as produced."""
    sends: int = 0
    """How many times one of its results was part of a service call's input."""
    resent_input_tokens: int = 0
    """Input tokens its results made up, summed over every service call that carried them
    (the first send included)."""
    attributed_cost_usd: Decimal = field(default_factory=Decimal)
    """What those tokens cost, over the calls whose price is known."""
    unpriced_input_tokens: int = 0
    """Part of ``resent_input_tokens`` sent to calls without a known price."""
    estimated_cost_usd: Decimal = field(default_factory=Decimal)
    """Part of ``attributed_cost_usd`` priced at the list price, for calls whose usage was not
    reported or not billed: an estimate. The rest is a share of billed cost."""

    @property
    def billed_cost_usd(self) -> Decimal:
        """Part of ``attributed_cost_usd`` that is a share of what the provider billed."""
        return self.attributed_cost_usd - self.estimated_cost_usd


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, not {value!r}")


def _prefix(values: Sequence[int]) -> list[int]:
    return [0, *accumulate(values)]


def _prefix_usd(values: Sequence[Decimal]) -> list[Decimal]:
    return [Decimal(0), *accumulate(values)]


def _model_pricer(
    price_for_model: Callable[[str], Decimal | None] | None,
) -> Callable[[ServiceCall], Decimal | None]:
    """A call's input price: its own, else its model's (``price_for_model`` called at most once
    per distinct model), else None."""
    model_prices: dict[str, Decimal | None] = {}

    def price_of(call: ServiceCall) -> Decimal | None:
        if call.input_usd_per_token is not None:
            return call.input_usd_per_token
        if call.model is None or price_for_model is None:
            return None
        if call.model not in model_prices:
            model_prices[call.model] = price_for_model(call.model)
        return model_prices[call.model]

    return price_of


def attribute(
    turns: Sequence[Sequence[ServiceCall]],
    *,
    price_for_model: Callable[[str], Decimal | None] | None = None,
) -> dict[str, ToolAttribution]:
    """Per function name (in order of first result): results, tokens, re-sends and their cost.

    See the module docstring for what ``turns`` means. ``price_for_model`` is called at most
    once per distinct model, for calls that give a ``model`` but no ``input_usd_per_token``.
    """
    price_of = _model_pricer(price_for_model)

    # Per turn: prefix sums over its counted calls of the price, of the estimated (list) price,
    # of "price unknown" and of the calls themselves.
    call_price: list[list[Decimal]] = []
    call_estimated: list[list[Decimal]] = []
    call_unpriced: list[list[int]] = []
    call_counted: list[list[int]] = []
    for turn in turns:
        prices = [price_of(call) if call.counted else Decimal(0) for call in turn]
        known = [p if p is not None else Decimal(0) for p in prices]
        estimated = [Decimal(0) if call.billed else p for call, p in zip(turn, known, strict=True)]
        missing = [1 if p is None else 0 for p in prices]
        call_price.append(_prefix_usd(known))
        call_estimated.append(_prefix_usd(estimated))
        call_unpriced.append(_prefix(missing))
        call_counted.append(_prefix([1 if call.counted else 0 for call in turn]))
    # ... and over turns, for "every call of turns t+1 .. t+k".
    turns_price = _prefix_usd([p[-1] for p in call_price])
    turns_estimated = _prefix_usd([p[-1] for p in call_estimated])
    turns_calls = _prefix([c[-1] for c in call_counted])
    turns_unpriced = _prefix([u[-1] for u in call_unpriced])
    n_turns = len(turns)

    totals: dict[str, ToolAttribution] = {}

    def add(
        agg: ToolAttribution,
        tokens: int,
        sends: int,
        unpriced: int,
        price: Decimal,
        estimated: Decimal,
    ) -> None:
        agg.sends += sends
        agg.resent_input_tokens += sends * tokens
        agg.unpriced_input_tokens += unpriced * tokens
        agg.attributed_cost_usd += price * tokens
        agg.estimated_cost_usd += estimated * tokens

    for t, turn in enumerate(turns):
        n_calls = len(turn)
        for i, call in enumerate(turn):
            for result in call.results:
                agg = totals.get(result.function_name)
                if agg is None:
                    agg = totals[result.function_name] = ToolAttribution(result.function_name)
                if call.counted:
                    agg.results += 1
                    agg.result_tokens += result.result_tokens

                # The rest of its own turn: calls i+1 .. n_calls-1.
                add(
                    agg,
                    result.result_tokens,
                    call_counted[t][n_calls] - call_counted[t][i + 1],
                    call_unpriced[t][n_calls] - call_unpriced[t][i + 1],
                    call_price[t][n_calls] - call_price[t][i + 1],
                    call_estimated[t][n_calls] - call_estimated[t][i + 1],
                )

                # Every call of turns t+1 .. last.
                last = n_turns - 1 if result.later_turns is None else t + result.later_turns
                last = min(last, n_turns - 1)
                if last <= t:
                    continue
                replayed = (
                    result.result_tokens
                    if result.replayed_tokens is None
                    else result.replayed_tokens
                )
                add(
                    agg,
                    replayed,
                    turns_calls[last + 1] - turns_calls[t + 1],
                    turns_unpriced[last + 1] - turns_unpriced[t + 1],
                    turns_price[last + 1] - turns_price[t + 1],
                    turns_estimated[last + 1] - turns_estimated[t + 1],
                )
    # A tool whose results were all produced and sent outside the period is not listed.
    return {name: a for name, a in totals.items() if a.results or a.sends}


def attribute_by_bucket(
    turns: Sequence[Sequence[ServiceCall]],
    buckets: Sequence[Sequence[K | None]],
    *,
    price_for_model: Callable[[str], Decimal | None] | None = None,
) -> dict[K, dict[str, ToolAttribution]]:
    """:func:`attribute` for every bucket at once: ``buckets`` gives each call's bucket (the
    same shape as ``turns``; None: in none), and bucket ``b``'s answer is what :func:`attribute`
    gives when the calls of ``b`` alone are counted (the calls' own ``counted`` is not read).
    Equal up to the rounding of Decimal sums taken in another order.

    One pass over the calls instead of one per bucket (a conversation of a thousand turns over
    fifty hours was replayed fifty times): each counted call adds, per function name, what its
    input carries at that moment (the results live then, and their tokens), so the work is the
    calls times the names live at each, whatever the number of buckets. Buckets appear in the
    order of their first call that lists something; names in order of first result."""
    price_of = _model_pricer(price_for_model)
    order: dict[str, int] = {}
    found: dict[K, dict[str, ToolAttribution]] = {}

    def agg(bucket: K, name: str) -> ToolAttribution:
        per_name = found.setdefault(bucket, {})
        a = per_name.get(name)
        if a is None:
            a = per_name[name] = ToolAttribution(name)
        return a

    # Per name, the results input carries: [how many, their tokens]. `later`: those of earlier
    # turns (replayed size), until the turn in `expiring`; `current`: this turn's so far.
    later: dict[str, list[int]] = {}
    expiring: dict[int, list[tuple[str, int]]] = {}
    n_turns = len(turns)
    for t, (turn, keys) in enumerate(zip(turns, buckets, strict=True)):
        for name, tokens in expiring.pop(t, ()):
            live = later[name]
            live[0] -= 1
            live[1] -= tokens
            if not live[0]:
                del later[name]
        current: dict[str, list[int]] = {}
        for call, key in zip(turn, keys, strict=True):
            if key is not None:
                price = price_of(call)
                for carried in (later, current):
                    for name, (count, tokens) in carried.items():
                        a = agg(key, name)
                        a.sends += count
                        a.resent_input_tokens += tokens
                        if price is None:
                            a.unpriced_input_tokens += tokens
                            continue
                        a.attributed_cost_usd += price * tokens
                        if not call.billed:
                            a.estimated_cost_usd += price * tokens
            for result in call.results:
                name = result.function_name
                order.setdefault(name, len(order))
                if key is not None:
                    a = agg(key, name)
                    a.results += 1
                    a.result_tokens += result.result_tokens
                live = current.setdefault(name, [0, 0])
                live[0] += 1
                live[1] += result.result_tokens
        # This turn's results in the calls of turns t+1 .. last, at their replayed size.
        for call in turn:
            for result in call.results:
                last = n_turns - 1 if result.later_turns is None else t + result.later_turns
                if min(last, n_turns - 1) <= t:
                    continue
                replayed = (
                    result.result_tokens
                    if result.replayed_tokens is None
                    else result.replayed_tokens
                )
                live = later.setdefault(result.function_name, [0, 0])
                live[0] += 1
                live[1] += replayed
                if last + 1 < n_turns:
                    expiring.setdefault(last + 1, []).append((result.function_name, replayed))
    return {
        bucket: dict(sorted(per_name.items(), key=lambda item: order[item[0]]))
        for bucket, per_name in found.items()
    }
