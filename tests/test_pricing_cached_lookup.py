"""The cached pricing path (model lookup cached, misses too; non-token usage given as 0) prices
every call exactly as genai-prices' own ``calc_price`` does, for every model in its catalogue."""

from __future__ import annotations

import fnmatch
from datetime import UTC, datetime

import genai_prices
from genai_prices import data_snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.pricing import Cost, PriceOverride, cost_for, prices_version

_CATALOGUE = sorted(
    {
        (provider.id, model.id)
        for provider in data_snapshot.get_snapshot().providers
        for model in provider.models
    }
)


def uncached(
    model: str, provider: str | None, inp: int, out: int, cached: int, write: int, at: datetime
) -> Cost | None:
    """What cost_for returned before the cache: calc_price over the same attempts."""
    usage = genai_prices.Usage(
        input_tokens=inp, output_tokens=out, cache_read_tokens=cached, cache_write_tokens=write
    )
    attempts = [(model, provider)] if provider else []
    attempts.append((model, None))
    prefix, sep, rest = model.partition("/")
    if sep and prefix and rest:
        attempts += [(rest, prefix), (rest, None)]
    for ref, provider_id in attempts:
        try:
            calc = genai_prices.calc_price(
                usage, ref, provider_id=provider_id, genai_request_timestamp=at
            )
        except LookupError:
            continue
        return Cost(
            total_usd=calc.total_price,
            input_usd=calc.input_price,
            output_usd=calc.output_price,
            source="genai-prices",
            source_version=prices_version(),
            priced_as=f"{calc.provider.id}/{calc.model.id}",
        )
    return None


def outcome(call):  # the cost, or the error it raised (its type and message)
    try:
        return call()
    except ValueError as exc:
        return (type(exc), str(exc))


names = st.one_of(
    st.sampled_from(_CATALOGUE).map(lambda pm: (pm[1], st.sampled_from([pm[0], None, "litellm"]))),
    st.sampled_from(_CATALOGUE).map(lambda pm: (f"{pm[0]}/{pm[1]}", st.just(None))),
    st.sampled_from(["no-such-model", "acme/unknown-7b", "gpt-4o-mini-2024-07-18", "claude-3"]).map(
        lambda m: (m, st.sampled_from([None, "openai", "nobody"]))
    ),
)


@st.composite
def calls(draw):
    model, providers = draw(names)
    provider = draw(providers)
    inp = draw(st.integers(0, 3_000_000))
    cached = draw(st.integers(0, inp))
    write = draw(st.integers(0, inp - cached))
    out = draw(st.integers(0, 200_000))
    at = draw(st.datetimes(datetime(2023, 1, 1), datetime(2027, 1, 1))).replace(tzinfo=UTC)
    return model, provider, inp, out, cached, write, at


@settings(max_examples=400, deadline=None)
@given(calls())
def test_cached_path_prices_every_call_as_calc_price_does(call) -> None:
    model, provider, inp, out, cached, write, at = call
    for _ in range(2):  # first call fills the caches, the second reads them
        got = outcome(
            lambda: cost_for(model, provider, inp, out, cached, at=at, cache_write_tokens=write)
        )
        assert got == outcome(lambda: uncached(model, provider, inp, out, cached, write, at))
        if isinstance(got, Cost):  # the same Decimals, digit for digit, not just equal values
            want = uncached(model, provider, inp, out, cached, write, at)
            assert str(got.total_usd) == str(want.total_usd)


@settings(max_examples=100, deadline=None)
@given(calls(), st.sampled_from(["gpt-4o*", "no-such-model", "claude-3"]))
def test_a_project_override_still_wins_over_the_cached_lookup(call, pattern) -> None:
    model, provider, inp, out, cached, write, at = call
    overrides = {pattern: PriceOverride(input_per_mtok="1", output_per_mtok="2")}
    cost_for(model, provider, inp, out, cached, at=at, cache_write_tokens=write)  # warm the cache
    cost = cost_for(
        model, provider, inp, out, cached, at=at, overrides=overrides, cache_write_tokens=write
    )
    if fnmatch.fnmatchcase(model.strip().lower(), pattern):
        assert cost is not None and cost.source == "override"
    else:
        assert cost == uncached(model, provider, inp, out, cached, write, at)
