"""Costs from genai-prices' bundled data, project overrides, unknown models, no network."""

from __future__ import annotations

import socket
import threading
from datetime import UTC, datetime
from decimal import Decimal

import genai_prices
import pytest
from genai_prices import data_snapshot

from webapp.pricing import Cost, PriceOverride, cost_for, prices_version

M = Decimal(1_000_000)
AT = datetime(2025, 9, 1, tzinfo=UTC)


def library(model: str, provider: str | None, **usage: int) -> genai_prices.types.PriceCalculation:
    return genai_prices.calc_price(
        genai_prices.Usage(**usage), model, provider_id=provider, genai_request_timestamp=AT
    )


def test_gpt_4o_matches_the_price_library_with_cached_input_as_subset() -> None:
    cost = cost_for("gpt-4o", "openai", 12_000, 800, cached_tokens=5_000, at=AT)
    expected = library(
        "gpt-4o", "openai", input_tokens=12_000, output_tokens=800, cache_read_tokens=5_000
    )
    assert cost == Cost(
        total_usd=expected.total_price,
        input_usd=expected.input_price,
        output_usd=expected.output_price,
        source="genai-prices",
        source_version=genai_prices.__version__,
        priced_as="openai/gpt-4o",
    )
    # The same by hand from the library's unit prices: 7 000 uncached + 5 000 cached input.
    p = expected.model_price
    assert cost.input_usd == (7_000 * p.input_mtok + 5_000 * p.cache_read_mtok) / M
    assert cost.output_usd == 800 * p.output_mtok / M
    assert cost.total_usd == cost.input_usd + cost.output_usd
    assert p.cache_read_mtok < p.input_mtok  # caching really is cheaper


@pytest.mark.parametrize(
    ("model", "provider", "priced_as"),
    [
        ("claude-sonnet-4-20250514", "anthropic", "anthropic/claude-sonnet-4-0"),
        ("claude-sonnet-4", None, "anthropic/claude-sonnet-4-0"),
        ("claude-3-5-sonnet-20241022", "anthropic", "anthropic/claude-3-5-sonnet"),
    ],
)
def test_claude_with_cache_reads_and_writes(
    model: str, provider: str | None, priced_as: str
) -> None:
    # Anthropic usage {input_tokens: 1000, cache_read_input_tokens: 3000,
    # cache_creation_input_tokens: 2000} is passed as input_tokens = 1000 + 3000 + 2000.
    cost = cost_for(model, provider, 6_000, 500, 3_000, AT, cache_write_tokens=2_000)
    assert cost is not None
    assert cost.priced_as == priced_as
    p = library(model, provider, input_tokens=1).model_price
    assert (
        cost.input_usd
        == (1_000 * p.input_mtok + 3_000 * p.cache_read_mtok + 2_000 * p.cache_write_mtok) / M
    )
    assert cost.output_usd == 500 * p.output_mtok / M
    assert cost.total_usd == cost.input_usd + cost.output_usd


def test_provider_is_a_hint_and_provider_prefixed_names_resolve() -> None:
    direct = cost_for("gpt-4o", "openai", 1_000, 100, at=AT)
    assert direct is not None
    for model, provider in [
        ("gpt-4o", None),
        ("GPT-4o", "OpenAI"),
        ("openai/gpt-4o", None),
        ("gpt-4o", "my-vllm"),  # unknown provider: matched by model name, as Langfuse does
    ]:
        cost = cost_for(model, provider, 1_000, 100, at=AT)
        assert cost == direct, (model, provider)
    # Known provider with its own price list wins.
    azure = cost_for("gpt-4o", "azure", 1_000, 100, at=AT)
    assert azure is not None and azure.priced_as == "azure/gpt-4o"
    # Known provider that lacks the model: fall back to the model name.
    bedrock = cost_for("claude-3-5-sonnet", "aws", 1_000, 100, at=AT)
    assert bedrock is not None and bedrock.priced_as == "anthropic/claude-3-5-sonnet"


def test_price_in_force_at_the_time_of_the_call() -> None:
    # genai-prices records OpenAI's o3 price cut of 2025-06-10.
    before = cost_for("o3", "openai", 1_000_000, 0, at=datetime(2025, 6, 1, tzinfo=UTC))
    after = cost_for("o3", "openai", 1_000_000, 0, at=datetime(2025, 6, 20, tzinfo=UTC))
    assert before is not None and after is not None
    assert before.total_usd > after.total_usd
    naive = cost_for("o3", "openai", 1_000_000, 0, at=datetime(2025, 6, 1))  # naive = UTC
    assert naive == before


@pytest.mark.parametrize("model", ["my-finetuned-llama", "", "   ", "gpt-4o-but-not-really-xyz"])
def test_unknown_model_is_none_not_an_error(model: str) -> None:
    assert cost_for(model, None, 1_000, 100, at=AT) is None
    assert cost_for(model, "openai", 1_000, 100, at=AT) is None


def test_override_exact_match_is_case_insensitive_and_wins_over_the_library() -> None:
    overrides = {
        "My-Llama-70B": PriceOverride(Decimal("0.60"), Decimal("0.80"), Decimal("0.06")),
        "gpt-4o": PriceOverride(Decimal("1"), Decimal("2")),  # negotiated price
    }
    # input: (10 000 - 4 000) * 0.60 + 4 000 * 0.06 = 3 600 + 240 = 3 840 USD per 1M
    #        -> 0.00384; output: 2 000 * 0.80 = 1 600 per 1M -> 0.0016; total 0.00544
    cost = cost_for("my-llama-70b", "vllm", 10_000, 2_000, 4_000, AT, overrides)
    assert cost == Cost(
        total_usd=Decimal("0.00544"),
        input_usd=Decimal("0.00384"),
        output_usd=Decimal("0.0016"),
        source="override",
        source_version="project-override",
        priced_as="override:My-Llama-70B",
    )
    # No cached price: cached tokens cost the full input price. 1 000 * 1 + 500 * 2 = 2 000 / 1M.
    negotiated = cost_for("gpt-4o", "openai", 1_000, 500, 400, AT, overrides)
    assert negotiated is not None and negotiated.total_usd == Decimal("0.002")
    assert negotiated.source == "override"


def test_override_glob_first_match_in_mapping_order_after_exact() -> None:
    overrides = {
        "llama-3*": PriceOverride(Decimal("0.2"), Decimal("0.2")),
        "llama-*": PriceOverride(Decimal("9"), Decimal("9")),
        "llama-3-8b": PriceOverride(Decimal("0.05"), Decimal("0.1")),
    }
    first = cost_for("llama-3.1-70b", None, 1_000_000, 0, overrides=overrides)
    assert first is not None and first.priced_as == "override:llama-3*"
    assert first.total_usd == Decimal("0.2")
    exact = cost_for("llama-3-8b", None, 1_000_000, 0, overrides=overrides)
    assert exact is not None and exact.priced_as == "override:llama-3-8b"
    other = cost_for("llama-2-13b", None, 0, 1_000_000, overrides=overrides)
    assert other is not None and other.total_usd == Decimal("9")
    # Not matched by any override: the library still prices it.
    fallback = cost_for("gpt-4o", None, 1_000, 0, at=AT, overrides=overrides)
    assert fallback is not None and fallback.source == "genai-prices"


def test_price_override_validation_and_from_dict() -> None:
    parsed = PriceOverride.from_dict({"input_per_mtok": "0.2", "output_per_mtok": 1})
    assert parsed == PriceOverride(Decimal("0.2"), Decimal("1"), None)
    assert isinstance(parsed.output_per_mtok, Decimal)
    with pytest.raises(ValueError, match="output_per_mtok"):
        PriceOverride.from_dict({"input_per_mtok": "0.2"})
    with pytest.raises(ValueError, match="unknown"):
        PriceOverride.from_dict({"input_per_mtok": 1, "output_per_mtok": 1, "cache": 1})
    for bad in ("-1", "abc", "NaN", True):
        with pytest.raises(ValueError):
            PriceOverride(bad, Decimal(1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        ({"input_tokens": -1, "output_tokens": 0}, "input_tokens"),
        ({"input_tokens": 10, "output_tokens": 1.5}, "output_tokens"),
        ({"input_tokens": 10, "output_tokens": 0, "cached_tokens": 11}, "cannot exceed"),
        (
            {"input_tokens": 10, "output_tokens": 0, "cached_tokens": 6, "cache_write_tokens": 5},
            "cannot exceed",
        ),
    ],
)
def test_invalid_counts_raise(counts: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cost_for("gpt-4o", None, **counts)


def test_zero_tokens_cost_zero() -> None:
    cost = cost_for("gpt-4o", None, 0, 0, at=AT)
    assert cost is not None and cost.total_usd == 0


def test_bundled_prices_only_no_network_no_updater(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("pricing tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    cost = cost_for("claude-sonnet-4", None, 1_000, 100)
    assert cost is not None
    assert cost.source_version == prices_version() == genai_prices.__version__
    assert data_snapshot._custom_snapshot is None  # nobody swapped in downloaded prices
    assert not any(t.name.startswith("genai_prices") for t in threading.enumerate())
