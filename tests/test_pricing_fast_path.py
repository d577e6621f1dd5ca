"""The fast pricing path (a plan per genai-prices price object: priced units resolved and
validated once, each unit's count as coefficients of our four token counts) gives exactly what
genai-prices' own, unmodified ``calc_price`` gives, for every price of its snapshot, any counts
and any time; and whatever it does not cover goes to that slow path."""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import genai_prices
import pytest
from genai_prices import units as genai_units
from genai_prices.data_snapshot import get_snapshot
from genai_prices.data_units import unit_data
from genai_prices.types import ModelPrice, Tier, TieredPrices
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp import pricing
from webapp.pricing import cost_for

_PROVIDERS = get_snapshot().providers
# Every (provider, model) of the snapshot, and every price object of each (conditional prices).
_MODELS = [(provider, model) for provider in _PROVIDERS for model in provider.models]
_PRICES = [
    (provider, model, price)
    for provider, model in _MODELS
    for price in (
        [model.prices]
        if isinstance(model.prices, ModelPrice)
        else [conditional.prices for conditional in model.prices]
    )
]
# Input counts around every tier threshold of the snapshot (the tier applies above its start).
_TIER_EDGES = sorted(
    {
        start + offset
        for _, _, price in _PRICES
        for value in price.__dict__.values()
        if isinstance(value, TieredPrices)
        for start in (tier.start for tier in value.tiers)
        for offset in (-1, 0, 1)
    }
)
_ZONES = [UTC, timezone(timedelta(hours=8)), timezone(timedelta(hours=-5, minutes=-30))]

Amounts = tuple[Decimal, Decimal, Decimal]


def genai_prices_amounts(
    provider: Any, model: Any, inp: int, out: int, cached: int, write: int, at: datetime
) -> Amounts:
    """genai-prices' own calc_price for the model, unmodified (the four keys we report)."""
    usage = genai_prices.Usage(
        input_tokens=inp, output_tokens=out, cache_read_tokens=cached, cache_write_tokens=write
    )
    calc = model.calc_price(usage, provider, genai_request_timestamp=at)
    return calc.total_price, calc.input_price, calc.output_price


def outcome(call: Callable[[], Amounts | None]) -> object:
    """The amounts digit for digit (not only equal values), or the error raised."""
    try:
        result = call()
    except ValueError as exc:
        return (type(exc), str(exc))
    return None if result is None else tuple(str(amount) for amount in result)


def draw_counts(rnd: random.Random, valid: bool = True) -> tuple[int, int, int, int]:
    inp = rnd.choice([0, rnd.randint(0, 5_000), rnd.randint(0, 3_000_000), rnd.choice(_TIER_EDGES)])
    if valid:
        cached = rnd.choice([0, rnd.randint(0, inp)])
        write = rnd.choice([0, rnd.randint(0, inp - cached)])
    else:  # more cached/written than input: genai-prices refuses some of these
        cached = rnd.randint(0, inp + 10)
        write = rnd.randint(0, inp + 10)
    out = rnd.choice([0, rnd.randint(0, 200_000)])
    return inp, out, cached, write


def price_object_amounts(price: ModelPrice, inp: int, out: int, cached: int, write: int) -> Amounts:
    """genai-prices' own ModelPrice.calc_price, unmodified."""
    usage = genai_prices.Usage(
        input_tokens=inp, output_tokens=out, cache_read_tokens=cached, cache_write_tokens=write
    )
    calc = price.calc_price(usage)
    return calc["total_price"], calc["input_price"], calc["output_price"]


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**32))  # a seed: every price object gets its own random counts
def test_every_price_object_of_the_snapshot_prices_as_genai_prices_does(seed: int) -> None:
    rnd = random.Random(seed)
    for _, _, price in _PRICES:
        plan = pricing._plan(price)
        assert plan is not None  # this snapshot has no price the fast path leaves to the slow
        for valid in (True, False):
            counts = draw_counts(rnd, valid)
            want = outcome(lambda: price_object_amounts(price, *counts))  # noqa: B023
            got = outcome(lambda: pricing._fast_amounts(plan, *counts))  # noqa: B023
            if isinstance(want, tuple) and want and want[0] is ValueError:
                assert got is None  # refused: the caller takes the slow path, for its error
            else:
                assert got == want


@st.composite
def calls(draw: st.DrawFn) -> tuple[Any, Any, int, int, int, int, datetime]:
    provider, model = draw(st.sampled_from(_MODELS))
    inp, out, cached, write = draw_counts(draw(st.randoms(use_true_random=False)))
    at = draw(
        st.datetimes(datetime(2022, 1, 1), datetime(2028, 1, 1), timezones=st.sampled_from(_ZONES))
    )
    return provider, model, inp, out, cached, write, at


@settings(max_examples=400, deadline=None)
@given(calls())
def test_any_model_counts_and_time_price_as_genai_prices_calc_price(call) -> None:
    provider, model, inp, out, cached, write, at = call
    assert outcome(
        lambda: pricing._model_amounts(provider, model, inp, out, cached, write, at)
    ) == outcome(lambda: genai_prices_amounts(provider, model, inp, out, cached, write, at))


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.data())
def test_counts_genai_prices_refuses_raise_its_own_error(rnd, data) -> None:
    provider, model = data.draw(st.sampled_from(_MODELS))
    inp, out, cached, write = draw_counts(rnd, valid=False)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert outcome(
        lambda: pricing._model_amounts(provider, model, inp, out, cached, write, at)
    ) == outcome(lambda: genai_prices_amounts(provider, model, inp, out, cached, write, at))


def _no_slow_path(*args: object) -> Amounts:
    raise AssertionError("priced on the slow path")


@pytest.mark.parametrize(
    ("model", "provider", "write"),
    [("gpt-4o", "openai", 0), ("claude-sonnet-4-5", "anthropic", 700), ("deepseek-chat", None, 0)],
)
def test_known_models_take_the_fast_path(
    monkeypatch: pytest.MonkeyPatch, model: str, provider: str | None, write: int
) -> None:
    at = datetime(2026, 3, 1, 2, tzinfo=UTC)
    want = cost_for(model, provider, 300_000, 2_000, 1_000, at=at, cache_write_tokens=write)
    monkeypatch.setattr(pricing, "_slow_amounts", _no_slow_path)
    assert cost_for(model, provider, 300_000, 2_000, 1_000, at=at, cache_write_tokens=write) == want


def test_groq_whisper_and_int_subclass_counts_take_the_slow_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Count(int):
        pass

    at = datetime(2026, 3, 1, tzinfo=UTC)
    slow_calls = []
    slow = pricing._slow_amounts

    def spy(*args: Any) -> Amounts:
        slow_calls.append(args[1].id)
        return slow(*args)

    monkeypatch.setattr(pricing, "_slow_amounts", spy)
    whisper = cost_for("whisper-large-v3", "groq", 0, 0, at=at)
    assert whisper is not None and slow_calls == ["whisper-large-v3"]
    subclassed = cost_for("gpt-4o", "openai", Count(1_000), Count(10), Count(100), at=at)
    assert slow_calls == ["whisper-large-v3", "gpt-4o"]
    assert subclassed == cost_for("gpt-4o", "openai", 1_000, 10, 100, at=at)


def test_prices_genai_prices_warns_about_or_refuses_have_no_plan() -> None:
    unknown_key = ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2), foo_mtok=Decimal(3))
    negative = ModelPrice(input_mtok=Decimal(-1))
    unsorted_tiers = ModelPrice(
        input_mtok=TieredPrices(base=Decimal(1), tiers=[Tier(start=10, price=Decimal(2))])
    )
    unsorted_tiers.input_mtok.tiers.append(Tier(start=5, price=Decimal(3)))
    no_ancestor = ModelPrice(cache_read_mtok=Decimal(1))  # cache reads priced, input not
    for price in (unknown_key, negative, unsorted_tiers, no_ancestor):
        assert pricing._plan(price) is None
    with warnings.catch_warnings(record=True) as caught:  # the slow path warns, every call
        warnings.simplefilter("always")
        unknown_key.calc_price(genai_prices.Usage(input_tokens=1))
    assert caught
    assert pricing._plan(ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2))) is not None


def test_an_unreported_priced_ancestor_goes_to_genai_prices_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """genai-prices refuses to infer a priced unit some reported count is part of (here a
    made-up "all tokens" unit): the plan marks those counts, the slow path raises its error."""
    raw = {**unit_data, "all_tokens": {"price_key": "all_mtok", "per": 1_000_000,
                                       "dimensions": {"family": "tokens"}}}  # fmt: skip
    monkeypatch.setattr(genai_units, "_bundled_registry", genai_units.UnitRegistry(raw))
    price = ModelPrice(input_mtok=Decimal(1), output_mtok=Decimal(2), all_mtok=Decimal(3))
    plan = pricing._plan(price)
    assert plan is not None and plan.failing_masks == frozenset(range(1, 16))
    assert pricing._fast_amounts(plan, 0, 0, 0, 0) == (Decimal(0), Decimal(0), Decimal(0))
    assert pricing._fast_amounts(plan, 10, 0, 0, 0) is None
    with pytest.raises(ValueError, match="Missing usage for all_tokens"):
        price.calc_price(genai_prices.Usage(input_tokens=10, output_tokens=0))


def test_plans_are_bounded() -> None:
    for n in range(4_200):
        pricing._plan(ModelPrice(input_mtok=Decimal(n)))
    assert len(pricing._PLANS) <= 4_096
