"""Attribution of re-sent tool results to tools: a hand-computed example and a brute-force check."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.analytics.attribution import (
    ServiceCall,
    ToolAttribution,
    ToolResult,
    attribute,
    attribute_by_bucket,
)
from webapp.pricing import input_price_per_token

USD2 = Decimal("0.000002")  # $2 per 1M input tokens
USD3 = Decimal("0.000003")  # $3 per 1M input tokens


def test_hand_computed_conversation() -> None:
    turns = [
        # Turn 0: round 0 asks for search + fetch, round 1 asks for search, then final text.
        [
            ServiceCall(
                USD2,
                [
                    ToolResult("search", 100, later_turns=1),
                    ToolResult("fetch", 300, later_turns=0),
                ],
            ),
            ServiceCall(USD2, [ToolResult("search", 50, later_turns=None, replayed_tokens=20)]),
            ServiceCall(USD2),  # final text
        ],
        # Turn 1: another model at $3/M, then a final call whose price is unknown.
        [
            ServiceCall(USD3, [ToolResult("fetch", 1000)]),
            ServiceCall(None),
        ],
        # Turn 2: just the final text.
        [ServiceCall(USD2)],
    ]
    # search #1 (100 tok, turn 0 call 0, kept 1 later turn):
    #   turn 0 calls 1, 2: 2 sends, 200 tok, 200 * $2/M = 0.0004
    #   turn 1 calls 0, 1: 2 sends, 200 tok, 100 * $3/M = 0.0003, 100 unpriced (call 1)
    #   -> 4 sends, 400 tok, $0.0007, 100 unpriced
    # search #2 (50 tok, turn 0 call 1, kept in all later turns, replayed as 20 tok):
    #   turn 0 call 2: 1 send, 50 tok, 50 * $2/M = 0.0001
    #   turn 1 calls 0, 1: 2 sends, 40 tok, 20 * $3/M = 0.00006, 20 unpriced
    #   turn 2 call 0: 1 send, 20 tok, 20 * $2/M = 0.00004
    #   -> 4 sends, 110 tok, $0.0002, 20 unpriced
    # search: 2 results, 150 tok; 8 sends, 510 tok, $0.0009, 120 unpriced
    #
    # fetch #1 (300 tok, turn 0 call 0, not kept): turn 0 calls 1, 2: 2 sends, 600 tok,
    #   600 * $2/M = 0.0012
    # fetch #2 (1000 tok, turn 1 call 0, not kept): turn 1 call 1 (unpriced): 1 send, 1000 tok,
    #   $0, 1000 unpriced
    # fetch: 2 results, 1300 tok; 3 sends, 1600 tok, $0.0012, 1000 unpriced
    assert attribute(turns) == {
        "search": ToolAttribution(
            function_name="search",
            results=2,
            result_tokens=150,
            sends=8,
            resent_input_tokens=510,
            attributed_cost_usd=Decimal("0.0009"),
            unpriced_input_tokens=120,
            estimated_cost_usd=Decimal("0.0009"),  # list prices only: all estimated
        ),
        "fetch": ToolAttribution(
            function_name="fetch",
            results=2,
            result_tokens=1300,
            sends=3,
            resent_input_tokens=1600,
            attributed_cost_usd=Decimal("0.0012"),
            unpriced_input_tokens=1000,
            estimated_cost_usd=Decimal("0.0012"),
        ),
    }
    assert list(attribute(turns)) == ["search", "fetch"]  # order of first result


def test_trailing_results_are_never_sent_in_their_turn() -> None:
    # A run cancelled after round 0: no later call in the turn saw the result.
    turns = [[ServiceCall(USD2, [ToolResult("lookup", 500)])]]
    assert attribute(turns)["lookup"] == ToolAttribution("lookup", 1, 500)
    # ... unless replay (per-service-call mode, no trimming) carries it into the next turn:
    # 2 calls * 500 tok = 1000 tok, 1000 * $2/M = $0.002.
    turns = [
        [ServiceCall(USD2, [ToolResult("lookup", 500, later_turns=5)])],
        [ServiceCall(USD2), ServiceCall(USD2)],
    ]
    assert attribute(turns)["lookup"] == ToolAttribution(
        "lookup", 1, 500, 2, 1000, Decimal("0.002"), 0, Decimal("0.002")
    )


def test_models_are_priced_through_the_callable_once_each() -> None:
    asked: list[str] = []

    def price(model: str) -> Decimal | None:
        asked.append(model)
        return {"gpt-4o": Decimal("0.0000025")}.get(model)

    turns = [
        [
            ServiceCall(model="gpt-4o", results=[ToolResult("t", 10)]),
            ServiceCall(model="gpt-4o"),
            ServiceCall(model="my-llm"),
            ServiceCall(model="my-llm"),
            ServiceCall(Decimal("0.00001"), model="ignored-because-explicit"),
        ]
    ]
    # 4 sends of 10 tok = 40; priced: 10 * 2.5e-6 + 10 * 1e-5 = 0.000125; unpriced 20.
    got = attribute(turns, price_for_model=price)["t"]
    assert (got.sends, got.resent_input_tokens, got.unpriced_input_tokens) == (4, 40, 20)
    assert got.attributed_cost_usd == Decimal("0.000125")
    assert asked == ["gpt-4o", "my-llm"]


def test_pricing_helper_plugs_in() -> None:
    turns = [
        [ServiceCall(model="gpt-4o", results=[ToolResult("t", 1000)]), ServiceCall(model="gpt-4o")]
    ]
    got = attribute(turns, price_for_model=input_price_per_token)["t"]
    assert got.attributed_cost_usd == 1000 * input_price_per_token("gpt-4o")  # type: ignore[operator]


def test_empty_and_invalid_input() -> None:
    assert attribute([]) == {}
    assert attribute([[], [ServiceCall(USD2)]]) == {}
    with pytest.raises(ValueError, match="result_tokens"):
        ToolResult("x", -1)
    with pytest.raises(ValueError, match="later_turns"):
        ToolResult("x", 1, later_turns=-2)


# --- cross-check against the definition, computed the slow way --------------------------------


def brute_force(turns: list[list[ServiceCall]]) -> dict[str, ToolAttribution]:
    out: dict[str, ToolAttribution] = {}
    for t, turn in enumerate(turns):
        for i, call in enumerate(turn):
            for r in call.results:
                agg = out.setdefault(r.function_name, ToolAttribution(r.function_name))
                if call.counted:
                    agg.results += 1
                    agg.result_tokens += r.result_tokens
                receivers = [(c, r.result_tokens) for c in turn[i + 1 :]]
                for u in range(t + 1, len(turns)):
                    if r.later_turns is not None and u - t > r.later_turns:
                        break
                    size = r.result_tokens if r.replayed_tokens is None else r.replayed_tokens
                    receivers += [(c, size) for c in turns[u]]
                for c, size in receivers:
                    if not c.counted:
                        continue
                    agg.sends += 1
                    agg.resent_input_tokens += size
                    if c.input_usd_per_token is None:
                        agg.unpriced_input_tokens += size
                    else:
                        agg.attributed_cost_usd += size * c.input_usd_per_token
                        if not c.billed:
                            agg.estimated_cost_usd += size * c.input_usd_per_token
    return {name: a for name, a in out.items() if a.results or a.sends}


results = st.builds(
    ToolResult,
    function_name=st.sampled_from(["a", "b", "c"]),
    result_tokens=st.integers(0, 5000),
    later_turns=st.one_of(st.none(), st.integers(0, 4)),
    replayed_tokens=st.one_of(st.none(), st.integers(0, 5000)),
)
calls = st.builds(
    ServiceCall,
    input_usd_per_token=st.one_of(
        st.none(), st.integers(0, 10_000).map(lambda n: Decimal(n) / 10**9)
    ),
    results=st.lists(results, max_size=3),
    billed=st.booleans(),
    counted=st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(calls, max_size=5), max_size=6))
def test_matches_brute_force(turns: list[list[ServiceCall]]) -> None:
    assert attribute(turns) == brute_force(turns)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(calls, st.one_of(st.none(), st.sampled_from("xyz"))), max_size=5),
        max_size=7,
    )
)
def test_by_bucket_is_attribute_with_each_buckets_calls_counted(turns_and_keys) -> None:
    """The stored tool costs are pieces per hour: one pass must give, for every hour, what the
    rule gives when that hour's calls alone count (the per-hour replay it replaced). These
    prices are exact in Decimal, so the sums agree to the last digit."""
    from dataclasses import replace

    turns = [[call for call, _ in turn] for turn in turns_and_keys]
    keys = [[key for _, key in turn] for turn in turns_and_keys]
    got = attribute_by_bucket(turns, keys)
    for bucket in {k for turn in keys for k in turn if k is not None}:
        counted = [
            [replace(c, counted=k == bucket) for c, k in zip(t, ks, strict=True)]
            for t, ks in zip(turns, keys, strict=True)
        ]
        want = attribute(counted)
        assert got.pop(bucket, {}) == want
        assert list(got.get(bucket, want)) == list(want)  # names in order of first result
    assert got == {}


def test_by_bucket_prices_calls_by_model_once_per_model():
    asked = []

    def price(model: str) -> Decimal:
        asked.append(model)
        return USD2

    turns = [[ServiceCall(None, [ToolResult("a", 10, later_turns=None)], model="m")]] * 3
    got = attribute_by_bucket(turns, [["h1"], ["h2"], ["h2"]], price_for_model=price)
    assert asked == ["m"]
    # h2: the second turn carries the first result, the third both earlier ones.
    assert got["h2"]["a"].attributed_cost_usd == 30 * USD2 and got["h2"]["a"].sends == 3


def test_billed_and_estimated_costs_are_kept_apart_and_calls_outside_the_period_add_nothing():
    """Issue 23: what is a share of billed cost and what is a list-price estimate is said
    apart, and a service call outside the period looked at adds no sends, tokens or cost."""
    billed = Decimal("0.000001")  # a share of what the provider billed, per token
    turns = [
        [
            ServiceCall(USD2, [ToolResult("lookup", 100, later_turns=None)], counted=False),
            ServiceCall(billed, billed=True),  # in the period, usage reported
            ServiceCall(USD2),  # in the period, no usage: list price
        ],
        [ServiceCall(billed, billed=True, counted=False)],
    ]
    got = attribute(turns)["lookup"]
    # Produced outside the period: no result counted; sent to the two counted calls.
    assert (got.results, got.sends, got.resent_input_tokens) == (0, 2, 200)
    assert got.attributed_cost_usd == 100 * billed + 100 * USD2
    assert got.estimated_cost_usd == 100 * USD2
    assert got.billed_cost_usd == 100 * billed
