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

Speed (every ingested model call is priced): the model lookup is cached per name (``_LOOKUPS``,
misses too), and so is, per genai-prices price object, a *plan* (``_PLANS``): its priced units
(genai-prices' ``_collect_resolved_model_prices``), already validated (its
``validate_priced_units``), and for each unit how its priced count follows from our four token
counts (what genai-prices' ``compute_leaf_values`` does on every call). A call then costs the
price arithmetic only, done as ``calc_price`` does it, in the same order (``_fast_amounts``).
Anything the plan does not cover goes to genai-prices' own ``calc_price`` (the slow path), so
every error and warning stays genai-prices' own; tests/test_pricing_fast_path.py checks the two
agree for every model of the snapshot.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any, NamedTuple

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
) -> bool:
    """Raise ValueError for impossible counts; return whether all four are plain ints."""
    if (
        type(input_tokens) is int
        and type(output_tokens) is int
        and type(cached_tokens) is int
        and type(cache_write_tokens) is int
        and output_tokens >= 0
        and cached_tokens >= 0
        and cache_write_tokens >= 0
        and cached_tokens + cache_write_tokens <= input_tokens
    ):
        return True  # the common case, without building the messages below
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
    return False


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


# Our four token counts, in the order of the ``counts`` tuples below, by genai-prices usage key.
_COUNT_KEYS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_ZERO = Decimal(0)
_INPUT, _OUTPUT = 1, 2  # a priced unit's direction: which of input_usd/output_usd it adds to
# ModelInfo.calc_price rewrites the usage of these (billed for at least 10 audio seconds).
_GROQ_WHISPER = ("whisper-large-v3", "whisper-large-v3-turbo")


class _PlannedUnit(NamedTuple):
    """One priced unit of a price object, ready for arithmetic (a tuple: unpacked per call).

    Its priced count is ``sum(coefficients[i] * counts[i])``; ``tiers`` are ``(start, price)``
    from the highest start down, or ``None`` for the flat ``price``. A unit whose count does not
    depend on ours (``requests`` is 1; one we never report is 0) has ``coefficients`` ``None``,
    and its ``price`` and tier prices are then already its USD (the same Decimal, computed once).
    """

    price: Decimal
    tiers: tuple[tuple[int, Decimal], ...] | None
    per: Decimal  # genai-prices divides by the int; by the same Decimal is the same quotient
    direction: int
    coefficients: tuple[int, int, int, int] | None


class _Plan(NamedTuple):
    """What pricing one call at a price object needs that does not depend on the counts.

    ``failing_masks``: which sets of positive counts (bit i set when ``counts[i] > 0``) make
    genai-prices refuse to infer an unreported priced unit (it raises ValueError): such calls
    take the slow path, which raises that error."""

    units: tuple[_PlannedUnit, ...]
    tiered: bool
    failing_masks: frozenset[int]


# Per price object (kept alive by its model), its plan, or None: price it on the slow path.
_PLANS: dict[int, tuple[Any, _Plan | None]] = {}
# genai-prices' ModelInfo, once imported (the fast path is for it, not for subclasses).
_MODEL_INFO: list[type] = []


def _make_plan(price: Any) -> _Plan | None:
    """The plan of a genai-prices ``ModelPrice``, or ``None`` where only the slow path is exact:
    a subclass (it may price differently), price keys genai-prices does not know (it warns on
    every call), invalid prices or priced units (it raises on every call)."""
    from genai_prices.decompose import is_descendant_or_self
    from genai_prices.types import (
        ModelPrice,
        TieredPrices,
        Usage,
        _collect_resolved_model_prices,
        _iter_model_price_attr_items,
    )
    from genai_prices.units import _get_registry
    from genai_prices.validation import validate_priced_units

    if type(price) is not ModelPrice:
        return None
    registry = _get_registry()
    if any(
        value is not None and key not in registry._all_price_keys
        for key, value in _iter_model_price_attr_items(price, registry)
    ):
        return None
    try:
        resolved = _collect_resolved_model_prices(price, registry)
        validate_priced_units(tuple(unit for unit, _ in resolved), registry)
    except ValueError:
        return None

    zeros = _zeros(price)
    # The priced count of each unit, as coefficients of our counts: compute_leaf_values, done
    # once on symbols. A unit's count is its usage value (ours, or 0: the other keys are given as
    # 0 or inferred as 0) less the counts of its priced descendants, most specific units first.
    priced = {unit.usage_key: unit for unit, _ in resolved if unit.usage_key != "requests"}
    leaves: dict[str, tuple[int, ...]] = {}
    for unit in sorted(priced.values(), key=lambda unit: (-len(unit.dimensions), unit.usage_key)):
        vector = tuple(int(unit.usage_key == key) for key in _COUNT_KEYS)
        for descendant in priced.values():
            if descendant is not unit and is_descendant_or_self(unit, descendant):
                vector = tuple(
                    a - b for a, b in zip(vector, leaves[descendant.usage_key], strict=True)
                )
        leaves[unit.usage_key] = vector

    # Which positive counts make genai-prices' own inference of an unreported priced unit fail
    # (it only looks at which reported values are > 0): asked of its Usage, all 16 cases.
    unreported = [key for key in priced if key not in _COUNT_KEYS and key not in zeros]
    failing = set()
    for mask in range(16) if unreported else ():
        usage = Usage(**{key: (mask >> bit) & 1 for bit, key in enumerate(_COUNT_KEYS)}, **zeros)
        for key in unreported:
            try:
                getattr(usage, key)
            except ValueError:
                failing.add(mask)
                break

    units = []
    for unit, value in resolved:
        base, tiers = value, None
        if isinstance(value, TieredPrices):
            base = value.base
            tiers = tuple((tier.start, tier.price) for tier in reversed(value.tiers))
        per = Decimal(unit.per)
        coefficients = leaves.get(unit.usage_key, (0, 0, 0, 0))
        if not any(coefficients):  # a fixed count: price it now, as calc_unit_price would
            count = int(unit.usage_key == "requests")  # _compute_registry_priced_counts
            base = base * count / per
            if tiers is not None:
                tiers = tuple((start, price * count / per) for start, price in tiers)
            coefficients = None
        units.append(
            _PlannedUnit(
                price=base,
                tiers=tiers,
                per=per,
                direction={"input": _INPUT, "output": _OUTPUT}.get(
                    unit.dimensions.get("direction", ""), 0
                ),
                coefficients=coefficients,
            )
        )
    return _Plan(
        units=tuple(units),
        tiered=any(unit.tiers is not None for unit in units),
        failing_masks=frozenset(failing),
    )


def _plan(price: Any) -> _Plan | None:
    entry = _PLANS.get(id(price))
    if entry is None or entry[0] is not price:
        plan = _make_plan(price)
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        # Another thread may clear the dict meanwhile: return our own plan, not a re-read.
        _PLANS[id(price)] = (price, plan)
        return plan
    return entry[1]


def _fast_amounts(
    plan: _Plan, input_tokens: int, output_tokens: int, cached_tokens: int, cache_write_tokens: int
) -> tuple[Decimal, Decimal, Decimal] | None:
    """(total, input, output) USD as genai-prices' ``ModelPrice.calc_price`` computes them (the
    same Decimal operations in the same order), or ``None`` when it would raise (the caller then
    takes the slow path for genai-prices' own error)."""
    if (
        plan.failing_masks
        and (
            (input_tokens > 0)
            | (output_tokens > 0) << 1
            | (cached_tokens > 0) << 2
            | (cache_write_tokens > 0) << 3
        )
        in plan.failing_masks
    ):
        return None
    total_input_tokens = input_tokens if plan.tiered else 0
    total = input_usd = output_usd = _ZERO
    for price, tiers, per, direction, coefficients in plan.units:
        if tiers is not None:  # calc_unit_price: the highest tier whose start is passed
            for start, tier_price in tiers:
                if total_input_tokens > start:
                    price = tier_price
                    break
        if coefficients is None:
            unit_usd = price  # priced in the plan
        else:
            a, b, c, d = coefficients
            count = (
                a * input_tokens + b * output_tokens + c * cached_tokens + d * cache_write_tokens
            )
            if count < 0:  # more-specific counts exceed their whole: genai-prices raises
                return None
            # Decimal(count) * price / per in genai-prices; the int converts to the same Decimal.
            unit_usd = price * count / per
        total += unit_usd
        if direction == _INPUT:
            input_usd += unit_usd
        elif direction == _OUTPUT:
            output_usd += unit_usd
    return total, input_usd, output_usd


def _genai_prices_cost(
    model: str,
    provider: str | None,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    cache_write_tokens: int,
    at: datetime,
    plain_counts: bool = True,
) -> Cost | None:
    """genai-prices' ``calc_price``, in two steps: the model lookup (cached, misses too) and the
    model's price for these counts (:func:`_model_amounts`)."""
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
        amounts = _model_amounts(
            price_provider,
            model_info,
            input_tokens,
            output_tokens,
            cached_tokens,
            cache_write_tokens,
            at,
            plain_counts,
        )
        return Cost(
            total_usd=amounts[0],
            input_usd=amounts[1],
            output_usd=amounts[2],
            source="genai-prices",
            source_version=prices_version(),
            priced_as=f"{price_provider.id}/{model_info.id}",
        )
    return None


def _model_amounts(
    provider: Any,
    model_info: Any,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    cache_write_tokens: int,
    at: datetime,
    plain_counts: bool = True,
) -> tuple[Decimal, Decimal, Decimal]:
    """(total, input, output) USD of these counts at ``model_info`` of ``provider`` at ``at``:
    from the plan of the price in force (:func:`_fast_amounts`), or else by the model's own
    ``calc_price`` (:func:`_slow_amounts`). The slow path is for counts of an int subclass
    (``plain_counts`` false: genai-prices converts them), a ``ModelInfo`` subclass, Groq's Whisper
    (its usage is rewritten), price objects without a plan (see :func:`_make_plan`) and counts
    genai-prices refuses (its own error is raised)."""
    if not _MODEL_INFO:
        from genai_prices.types import ModelInfo

        _MODEL_INFO.append(ModelInfo)
    if (
        plain_counts
        and type(model_info) is _MODEL_INFO[0]
        and not (provider.id == "groq" and model_info.id in _GROQ_WHISPER)
    ):
        plan = _plan(model_info.get_prices(at))
        if plan is not None:
            amounts = _fast_amounts(
                plan, input_tokens, output_tokens, cached_tokens, cache_write_tokens
            )
            if amounts is not None:
                return amounts
    return _slow_amounts(
        provider, model_info, input_tokens, output_tokens, cached_tokens, cache_write_tokens, at
    )


def _slow_amounts(
    provider: Any,
    model_info: Any,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    cache_write_tokens: int,
    at: datetime,
) -> tuple[Decimal, Decimal, Decimal]:
    """genai-prices' own ``calc_price`` (what the fast path is tested against)."""
    import genai_prices

    usage = genai_prices.Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cached_tokens,
        cache_write_tokens=cache_write_tokens,
        **_zeros(model_info.get_prices(at)),
    )
    calc = model_info.calc_price(usage, provider, genai_request_timestamp=at)
    return calc.total_price, calc.input_price, calc.output_price


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
    plain_counts = _check_counts(input_tokens, output_tokens, cached_tokens, cache_write_tokens)
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
        model.strip(),
        provider,
        input_tokens,
        output_tokens,
        cached_tokens,
        cache_write_tokens,
        at,
        plain_counts,
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
