"""USD cost of an LLM service call, from genai-prices' bundled price data or project overrides.

Pure module (no Flask, no database). No network: genai-prices only downloads newer prices when
someone starts ``genai_prices.UpdatePrices``; Toolscope never does, so ``calc_price`` always reads
the snapshot bundled with the installed package (its version is reported as
:attr:`Cost.source_version`; upgrading the package is how prices get updated).

Token semantics follow OpenAI's usage object: ``input_tokens`` is *all* prompt tokens, and
``cached_tokens`` (cache reads, billed at the cheaper cached rate) and ``cache_write_tokens``
(Anthropic's cache creation, billed higher) are subsets of it. Anthropic reports them *beside*
``input_tokens``, so callers pass ``input_tokens + cache_read_input_tokens +
cache_creation_input_tokens`` for Anthropic, with ``cached_tokens=cache_read_input_tokens``.

Matching: a project override wins (exact model name, case-insensitive, then the first glob
pattern in mapping order, e.g. ``"llama-3*"``); otherwise genai-prices is asked for the model at
``provider`` when that pair is known, else by model name alone (as Langfuse does; the result says
which price was used in :attr:`Cost.priced_as`); a ``"provider/model"`` name is also tried split.
No match returns ``None``. Amounts are exact :class:`~decimal.Decimal` USD, not rounded.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

__all__ = [
    "OVERRIDE_VERSION",
    "Cost",
    "PriceOverride",
    "cost_for",
    "input_price_per_token",
    "parse_overrides",
    "prices_version",
]

OVERRIDE_VERSION = "project-override"
_PER = Decimal(1_000_000)


def _as_price(name: str, value: object) -> Decimal:
    """A non-negative finite Decimal from a Decimal, int or numeric string (floats via str)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number of USD per million tokens, not {value!r}")
    try:
        price = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError) as exc:
        raise ValueError(
            f"{name} must be a number of USD per million tokens, not {value!r}"
        ) from exc
    if not price.is_finite() or price < 0:
        raise ValueError(f"{name} must be a finite, non-negative number, not {value!r}")
    return price


@dataclass(frozen=True, slots=True)
class PriceOverride:
    """A project's own price for a model (self-hosted, fine-tuned, negotiated), USD per 1M tokens.

    ``cached_input_per_mtok`` of ``None`` bills cached tokens at the full input price.
    """

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cached_input_per_mtok: Decimal | None = None

    def __post_init__(self) -> None:
        # Accept ints and numeric strings (settings arrive as JSON); store Decimals.
        object.__setattr__(self, "input_per_mtok", _as_price("input_per_mtok", self.input_per_mtok))
        object.__setattr__(
            self, "output_per_mtok", _as_price("output_per_mtok", self.output_per_mtok)
        )
        if self.cached_input_per_mtok is not None:
            object.__setattr__(
                self,
                "cached_input_per_mtok",
                _as_price("cached_input_per_mtok", self.cached_input_per_mtok),
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PriceOverride:
        """From e.g. ``{"input_per_mtok": "0.2", "output_per_mtok": "0.6"}`` (JSON settings)."""
        unknown = set(data) - {"input_per_mtok", "output_per_mtok", "cached_input_per_mtok"}
        if unknown:
            raise ValueError(f"unknown price override field(s): {', '.join(sorted(unknown))}")
        try:
            return cls(
                input_per_mtok=data["input_per_mtok"],
                output_per_mtok=data["output_per_mtok"],
                cached_input_per_mtok=data.get("cached_input_per_mtok"),
            )
        except KeyError as exc:
            raise ValueError(f"price override needs {exc.args[0]}") from exc


@dataclass(frozen=True, slots=True)
class Cost:
    """What a call cost, and on whose prices.

    ``source`` is ``"genai-prices"`` or ``"override"``; ``source_version`` the genai-prices
    package version or ``"project-override"``; ``priced_as`` the price entry used, e.g.
    ``"openai/gpt-4o"`` or ``"override:llama-3*"``.
    """

    total_usd: Decimal
    input_usd: Decimal
    output_usd: Decimal
    source: str
    source_version: str
    priced_as: str


@cache
def prices_version() -> str:
    """Version of the installed genai-prices, i.e. of the bundled price data."""
    from importlib.metadata import version

    return version("genai-prices")


def _check_counts(
    input_tokens: int, output_tokens: int, cached_tokens: int, cache_write_tokens: int
) -> None:
    counts = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": cached_tokens,
        "cache_write_tokens": cache_write_tokens,
    }
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, not {value!r}")
    if cached_tokens + cache_write_tokens > input_tokens:
        raise ValueError(
            f"cached_tokens ({cached_tokens}) + cache_write_tokens ({cache_write_tokens}) are part"
            f" of input_tokens ({input_tokens}) and cannot exceed it"
        )


def _find_override(
    model: str, overrides: Mapping[str, PriceOverride]
) -> tuple[str, PriceOverride] | None:
    wanted = model.strip().lower()
    for key, override in overrides.items():
        if key.strip().lower() == wanted:
            return key, override
    for key, override in overrides.items():
        if any(c in key for c in "*?[") and fnmatch.fnmatchcase(wanted, key.strip().lower()):
            return key, override
    return None


def _override_cost(
    key: str,
    price: PriceOverride,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
) -> Cost:
    cached_rate = price.cached_input_per_mtok
    if cached_rate is None:
        cached_rate = price.input_per_mtok
    # Cache writes have no separate override price: they count as ordinary input.
    input_usd = (
        (input_tokens - cached_tokens) * price.input_per_mtok + cached_tokens * cached_rate
    ) / _PER
    output_usd = output_tokens * price.output_per_mtok / _PER
    return Cost(
        total_usd=input_usd + output_usd,
        input_usd=input_usd,
        output_usd=output_usd,
        source="override",
        source_version=OVERRIDE_VERSION,
        priced_as=f"override:{key}",
    )


@cache
def _unpriced_usage_keys() -> frozenset[str]:
    """Usage keys outside the token family (web searches, audio seconds, pages...), ``requests``
    aside. We never report them, so genai-prices infers each priced one as 0 on every call, a
    costly scan of its unit registry; passing them as 0 gives the same counts, because no unit
    of another family can be a token count's part or overlap (its inference rules)."""
    from genai_prices.units import _get_registry

    return frozenset(
        key
        for key, unit in _get_registry().units.items()
        if unit.dimensions.get("family") not in ("tokens", "requests")
    )


# Resolved (provider, model) per (snapshot, model_ref, provider_id), misses included:
# genai-prices caches its hits but scans the whole catalogue again for every unknown model.
_LOOKUPS: dict[tuple[int, str, str | None], tuple[Any, Any] | None] = {}
# Per price object (kept alive by its model): the priced usage keys given as 0 (see above).
_ZEROS: dict[int, tuple[Any, dict[str, int]]] = {}


def _lookup(snapshot: Any, model_ref: str, provider_id: str | None) -> tuple[Any, Any] | None:
    key = (id(snapshot), model_ref, provider_id)
    try:
        return _LOOKUPS[key]
    except KeyError:
        pass
    try:
        found = snapshot.find_provider_model(model_ref, None, provider_id, None)
    except LookupError:
        found = None
    if len(_LOOKUPS) >= 4096:  # model names come from clients: bound what they can grow
        _LOOKUPS.clear()
    # Another thread may clear the dict meanwhile: return our own result, not a re-read.
    _LOOKUPS[key] = found
    return found


def _zeros(price: Any) -> dict[str, int]:
    entry = _ZEROS.get(id(price))
    if entry is None or entry[0] is not price:
        from genai_prices.units import _get_registry

        units = _get_registry().units
        zeros = {
            key: 0
            for key in _unpriced_usage_keys()
            if getattr(price, units[key].price_key, None) is not None
        }
        if len(_ZEROS) >= 4096:
            _ZEROS.clear()
        entry = _ZEROS[id(price)] = (price, zeros)
    return entry[1]


def _genai_prices_cost(
    model: str,
    provider: str | None,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    cache_write_tokens: int,
    at: datetime,
) -> Cost | None:
    """genai-prices' ``calc_price``, in two steps: the model lookup (cached, misses too) and the
    model's own ``calc_price`` (genai-prices' arithmetic, unchanged)."""
    import genai_prices
    from genai_prices.data_snapshot import get_snapshot

    snapshot = get_snapshot()
    attempts: list[tuple[str, str | None]] = []
    if provider:
        attempts.append((model, provider))
    attempts.append((model, None))
    prefix, sep, rest = model.partition("/")
    if sep and prefix and rest:  # "openai/gpt-4o", "anthropic/claude-sonnet-4"
        attempts.append((rest, prefix))
        attempts.append((rest, None))
    for model_ref, provider_id in attempts:
        found = _lookup(snapshot, model_ref, provider_id)
        if found is None:
            continue
        price_provider, model_info = found
        usage = genai_prices.Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cached_tokens,
            cache_write_tokens=cache_write_tokens,
            **_zeros(model_info.get_prices(at)),
        )
        calc = model_info.calc_price(usage, price_provider, genai_request_timestamp=at)
        return Cost(
            total_usd=calc.total_price,
            input_usd=calc.input_price,
            output_usd=calc.output_price,
            source="genai-prices",
            source_version=prices_version(),
            priced_as=f"{calc.provider.id}/{calc.model.id}",
        )
    return None


def cost_for(
    model: str,
    provider: str | None,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int = 0,
    at: datetime | None = None,
    overrides: Mapping[str, PriceOverride] | None = None,
    *,
    cache_write_tokens: int = 0,
) -> Cost | None:
    """USD cost of one service call, or ``None`` when no price is known for ``model``.

    ``input_tokens`` includes ``cached_tokens`` and ``cache_write_tokens`` (see the module
    docstring). ``at`` picks the price in force at that time (naive means UTC; default now).
    Raises :class:`ValueError` for negative counts or cached + cache-write above input.
    """
    _check_counts(input_tokens, output_tokens, cached_tokens, cache_write_tokens)
    if not model or not model.strip():
        return None
    if overrides:
        found = _find_override(model, overrides)
        if found is not None:
            return _override_cost(*found, input_tokens, output_tokens, cached_tokens)
    if at is None:
        at = datetime.now(tz=UTC)
    elif at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return _genai_prices_cost(
        model.strip(), provider, input_tokens, output_tokens, cached_tokens, cache_write_tokens, at
    )


def input_price_per_token(
    model: str,
    provider: str | None = None,
    at: datetime | None = None,
    overrides: Mapping[str, PriceOverride] | None = None,
) -> Decimal | None:
    """List price of one uncached input token (lowest tier), or ``None`` if ``model`` is unknown.

    For :mod:`webapp.analytics.attribution` when a service call's actual usage is not known.
    """
    cost = cost_for(model, provider, 1_000, 0, at=at, overrides=overrides)
    return None if cost is None else cost.input_usd / 1_000


def parse_overrides(raw: Mapping[str, Any] | None) -> dict[str, PriceOverride]:
    """A project's valid price overrides from their stored form (an invalid one is skipped and
    logged, as ingestion does): the charts and the background attribution read them alike."""
    parsed = {}
    for model, value in (raw or {}).items():
        try:
            parsed[model] = PriceOverride.from_dict(value)
        except (ValueError, TypeError, AttributeError):
            log.warning("price override for %r is invalid and ignored", model)
    return parsed
