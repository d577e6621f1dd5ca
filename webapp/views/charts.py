"""The charts of the Costs page, the tools pages and the conversation page: reads from
``webapp.queries.analytics``, numbers and figures from the pure ``webapp.analytics``, and the
request handling the three areas share (filters, 422 answers, CSV downloads).

Only the queries a requested chart needs are run, so a CSV download of one chart does not pay
for the others. Everything here runs a fixed number of SQL statements (see the tests).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from flask import render_template, request

from ..analytics import conversation_charts, project_charts
from ..analytics.attribution import ToolAttribution
from ..analytics.context import ConversationContext, conversation_context
from ..analytics.filters import ChartFilters, FilterError, parse_filters
from ..analytics.records import LoadedConversation
from ..analytics.tables import Chart
from ..analytics.tool_costs import (
    InputPrices,
    billed_inputs,
    merge_attributions,
    tool_attribution,
)
from ..analytics.windows import context_window
from ..db import db, utcnow
from ..errors import ApiError, error_response
from ..ingest.transaction import Write, run_write
from ..pricing import PriceOverride, parse_overrides
from ..queries import analytics as queries
from ..queries.projects import price_overrides
from ..replay.export import (
    OptionError,
    ReplayQuery,
    form_params,
    parse_query,
    resolve_freshness,
    whole_seconds,
)
from ..replay.gc_pause import gc_paused
from ..replay.options import Persistence
from ..services import attribution_store as store
from ..tokens import count_tokens
from .common import error_page, wants_json

log = logging.getLogger(__name__)

# Project-wide attribution reads each conversation's stored pieces
# (webapp.services.attribution_store) and replays at most attribution_store.INLINE_MAX.


# --- what every chart view does with its request -------------------------------------------


def filters_arg() -> ChartFilters:
    """The period, channel and tool filters of the request (FilterError if unusable)."""
    now = utcnow()
    return parse_filters(request.args, now.date(), now)


def bad_argument(exc: FilterError | OptionError, fmt: str = "html"):
    """422: a JSON error for the JSON twins and CSV downloads, an error page otherwise."""
    if fmt in ("json", "csv") or wants_json():
        return error_response(422, str(exc), [{"field": exc.field, "message": exc.message}])
    return error_page(422, "That address does not work", str(exc))


def html(template: str, status: int = 200, **context: Any):
    return render_template(template, **context), status, {"Vary": "HX-Request, Accept"}


def project_overrides(project_id: int) -> tuple[dict[str, Any], dict[str, PriceOverride]]:
    """The stored price overrides (as entered) and the valid ones, parsed."""
    raw = price_overrides(project_id)
    return raw, parse_overrides(raw)


# --- the charts --------------------------------------------------------------------------------


def _prices(overrides: Mapping[str, PriceOverride], loaded: Iterable[LoadedConversation]):
    providers = {
        (c.message_row_id, c.round_index): c.provider for conv in loaded for c in conv.costs
    }
    return InputPrices(overrides, providers)


def _context(
    conv: LoadedConversation,
    freshness_seconds: float | None,
    persistence: Persistence,
) -> ConversationContext:
    return conversation_context(
        conv.history,
        conv.counts,
        count=count_tokens,
        freshness_seconds=freshness_seconds,
        persistence=persistence,
    )


# --- project ----------------------------------------------------------------------------------


@gc_paused()
def project_attribution(
    project_id: int, overrides: Mapping[str, PriceOverride], f: ChartFilters
) -> tuple[list[ToolAttribution], tuple[str, ...]]:
    """Stored pieces of the whole hours in the period, summed; replayed here: the stale
    conversations (stored again for the next request) and those active in the partial hour a
    range starts in, at most ``INLINE_MAX`` of them."""
    key = store.prices_key(overrides)
    stale, n_stale = store.stale_conversations(project_id, f, store.INLINE_MAX, key)
    hours_from = f.start
    edge: list[int] = []
    n_edge = 0
    hour = store.partial_hour(f)
    if hour is not None:
        skip = [i for i, _ in stale]
        edge, n_edge = store.edge_conversations(
            project_id, f, hour, skip, store.INLINE_MAX - len(stale)
        )
        # Past the bound, the partial hour counts whole; else its rows are left to the replay.
        hours_from = hour if n_edge > len(edge) else hour + store.HOUR
    inline = [i for i, _ in stale] + edge
    loaded = queries.load_conversations(project_id, inline) if inline else []
    prices = _prices(overrides, loaded)
    # As the stored pieces are computed (`store.context_of`): made once for both.
    contexts = {conv.id: store.context_of(conv) for conv in loaded}
    # Only the service calls in the period count, as on the cost per day.
    parts = [
        tool_attribution(
            contexts[conv.id],
            prices,
            billed_inputs(conv.history, conv.costs, prices),
            (f.start, f.end),
        )
        for conv in loaded
    ]
    if stale:
        revisions = dict(stale)
        stored = [c for c in loaded if c.id in revisions]
        _store_stale(project_id, overrides, revisions, stored, contexts)
    parts.append(store.stored_totals(project_id, f, inline, hours_from))
    merged = merge_attributions(parts)
    if f.tool:
        merged = [a for a in merged if a.function_name == f.tool]
    notes = [
        "Replay as configured: per-run persistence, each conversation's freshness window.",
    ]
    if n_stale > len(stale):
        notes.append(
            f"Partial: {n_stale - len(stale):,} conversations changed since their figures were "
            "stored; they count as last stored until they are computed again."
        )
    if n_edge > len(edge):
        notes.append(
            f"Approximate: the period's first hour counts whole for {n_edge - len(edge):,} "
            "conversations."
        )
    return merged, tuple(notes)


def _store_stale(
    project_id: int,
    overrides: Mapping[str, PriceOverride],
    revisions: dict[int, int],
    loaded: list[LoadedConversation],
    contexts: Mapping[int, ConversationContext],
) -> None:
    """Store what the request replayed anyway, so that the next one reads it; a busy
    database only leaves it for later."""
    computed = store.compute(project_id, revisions, overrides, loaded, contexts)
    db.session.commit()  # the read ends before the write transaction begins
    try:
        run_write(Write(store.store, (project_id, computed)))
    except ApiError:
        log.info("tool costs of %d conversations left stale: database busy", len(computed))


def project_charts_for(
    project_id: int,
    overrides: Mapping[str, PriceOverride],
    f: ChartFilters,
    names: Iterable[str] = project_charts.PROJECT_CHARTS,
) -> dict[str, Chart]:
    """The named project charts, in ``PROJECT_CHARTS`` order."""
    wanted = set(names)
    days = f.days
    usage = queries.daily_usage(project_id, f) if wanted & {"cost", "tokens"} else []
    activity = queries.daily_tool_activity(project_id, f) if wanted & {"tokens", "errors"} else []
    charts: dict[str, Chart] = {}
    for name in project_charts.PROJECT_CHARTS:
        if name not in wanted:
            continue
        if name == "cost":
            charts[name] = project_charts.cost_chart(usage, days)
        elif name == "tokens":
            charts[name] = project_charts.tokens_chart(usage, activity, days)
        elif name == "tool-cost":
            attributions, notes = project_attribution(project_id, overrides, f)
            charts[name] = project_charts.tool_cost_chart(attributions, notes)
        elif name == "result-sizes":
            charts[name] = project_charts.result_sizes_chart(queries.result_sizes(project_id, f))
        elif name == "errors":
            charts[name] = project_charts.error_rate_chart(activity, days)
    return charts


# --- conversation -----------------------------------------------------------------------------


def conversation_options(args: Mapping[str, str]) -> ReplayQuery:
    """The replay options the conversation charts follow, read as the replay preview reads them
    (``persistence``, ``freshness`` and ``context_budget`` change the charts). Raises
    ``OptionError`` naming the parameter."""
    return parse_query(form_params(args))


@dataclass(frozen=True, slots=True)
class ConversationCharts:
    conversation: LoadedConversation
    freshness_seconds: int | float | None
    charts: dict[str, Chart]


@gc_paused()
def conversation_charts_for(
    project_id: int,
    overrides: Mapping[str, PriceOverride],
    conversation_id: int,
    options: ReplayQuery,
    names: Iterable[str] = conversation_charts.CONVERSATION_CHARTS,
) -> ConversationCharts | None:
    """The conversation's charts, or None when it is not in the project."""
    loaded = queries.load_conversations(project_id, [conversation_id])
    if not loaded:
        return None
    conv = loaded[0]
    freshness = whole_seconds(resolve_freshness(options.freshness, conv.freshness_seconds))
    ctx = _context(conv, freshness, options.persistence)
    wanted = set(names)
    charts: dict[str, Chart] = {}
    for name in conversation_charts.CONVERSATION_CHARTS:
        if name not in wanted:
            continue
        if name == "context":
            bar_models = {b.model for b in ctx.bars}
            provider = next((c.provider for c in conv.costs if c.provider), None)
            window = context_window(ctx.model, provider if len(bar_models) <= 1 else None)
            charts[name] = conversation_charts.context_chart(ctx, window, options.context_budget)
        elif name == "result-tokens":
            charts[name] = conversation_charts.result_tokens_chart(ctx, conv.history)
        elif name == "turn-cost":
            charts[name] = conversation_charts.turn_cost_chart(ctx, conv.costs)
        elif name == "tool-cost":
            prices = _prices(overrides, [conv])
            billed = billed_inputs(conv.history, conv.costs, prices)
            attribution = tool_attribution(ctx, prices, billed)
            charts[name] = project_charts.tool_cost_chart(merge_attributions([attribution]))
    return ConversationCharts(conv, freshness, charts)
