"""The project charts (Costs page, tools pages): query records in, :class:`Chart` out.

Pure module: the rows are :mod:`webapp.analytics.records` (read by ``webapp.queries.analytics``),
attribution comes from :mod:`webapp.analytics.tool_costs`; here they become tables (days without
data filled with zeros) and figures built from those same tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from decimal import Decimal

from . import figures
from .attribution import ToolAttribution
from .records import PERCENTILES, DailyToolActivity, DailyUsage, ResultSizes
from .tables import Chart, Column, Table, rows_of

__all__ = [
    "ALL_TOOLS",
    "PROJECT_CHARTS",
    "TOP_TOOLS",
    "cost_chart",
    "error_rate_chart",
    "result_sizes_chart",
    "tokens_chart",
    "tool_cost_chart",
]

# Chart names as they appear in URLs (/costs/<name>.csv), in page order.
PROJECT_CHARTS = ("cost", "tokens", "tool-cost", "result-sizes", "errors")
TOP_TOOLS = 5  # tools drawn one by one in the error-rate chart; the table has every tool
MAX_BARS = 25  # tools drawn in the attribution chart; the table has every tool
ALL_TOOLS = "(all tools)"


def _iso(days: Sequence[date]) -> list[str]:
    return [d.isoformat() for d in days]


def cost_chart(usage: Sequence[DailyUsage], days: Sequence[date]) -> Chart:
    """Stored cost of the service calls per day."""
    by_day = {u.day: u for u in usage}
    cost = [by_day[d].cost_usd if d in by_day else Decimal(0) for d in days]
    calls = [by_day[d].service_calls if d in by_day else 0 for d in days]
    unpriced = [by_day[d].unpriced_calls if d in by_day else 0 for d in days]
    table = Table(
        (
            Column("day", "Day", "date"),
            Column("cost_usd", "Cost", "usd"),
            Column("service_calls", "Service calls"),
            Column("unpriced_calls", "Without price"),
        ),
        rows_of(list(days), cost, calls, unpriced),
    )
    notes = ()
    if sum(unpriced):
        notes = (
            f"{sum(unpriced):,} service calls have no cost: their model is unknown to the price "
            "data or they reported no usage. Add a price for your own models below.",
        )
    return Chart(
        "cost",
        "Cost per day",
        "What the LLM service calls cost, as fixed at ingestion with the prices of that day.",
        table,
        figures.figure_json(figures.cost_per_day_figure(_iso(days), cost)),
        notes,
    )


def tokens_chart(
    usage: Sequence[DailyUsage], activity: Sequence[DailyToolActivity], days: Sequence[date]
) -> Chart:
    """Reported input (uncached, cached) and output tokens per day, and tool-result tokens."""
    by_day = {u.day: u for u in usage}
    results: dict[date, int] = {}
    for a in activity:
        results[a.day] = results.get(a.day, 0) + a.result_tokens
    inputs = [by_day[d].input_tokens if d in by_day else 0 for d in days]
    cached = [by_day[d].cached_tokens if d in by_day else 0 for d in days]
    output = [by_day[d].output_tokens if d in by_day else 0 for d in days]
    produced = [results.get(d, 0) for d in days]
    table = Table(
        (
            Column("day", "Day", "date"),
            Column("input_tokens", "Input"),
            Column("cached_tokens", "of which cached"),
            Column("output_tokens", "Output"),
            Column("tool_result_tokens", "Tool results produced"),
        ),
        rows_of(list(days), inputs, cached, output, produced),
    )
    uncached = [i - c for i, c in zip(inputs, cached, strict=True)]
    return Chart(
        "tokens",
        "Tokens per day",
        "Input and output tokens the providers reported, and the tokens of the tool results "
        "agents produced that day (each is then re-sent on later calls).",
        table,
        figures.figure_json(
            figures.tokens_per_day_figure(_iso(days), uncached, cached, output, produced)
        ),
    )


def tool_cost_chart(attributions: Sequence[ToolAttribution], notes: tuple[str, ...] = ()) -> Chart:
    """Top tools by the input cost their results caused by being sent (and re-sent)."""
    table = Table(
        (
            Column("tool", "Tool", "text"),
            Column("attributed_cost_usd", "Attributed cost", "usd"),
            Column("billed_cost_usd", "Share of billed cost", "usd"),
            Column("estimated_cost_usd", "Estimated at list price", "usd"),
            Column("resent_input_tokens", "Input tokens caused"),
            Column("sends", "Times sent"),
            Column("results", "Results"),
            Column("result_tokens", "Result tokens"),
            Column("unpriced_input_tokens", "Tokens without price"),
        ),
        tuple(
            (
                a.function_name,
                a.attributed_cost_usd,
                a.billed_cost_usd,
                a.estimated_cost_usd,
                a.resent_input_tokens,
                a.sends,
                a.results,
                a.result_tokens,
                a.unpriced_input_tokens,
            )
            for a in attributions
        ),
    )
    top = list(attributions)[:MAX_BARS]
    figure = figures.tool_cost_figure(
        [a.function_name for a in top],
        [a.attributed_cost_usd for a in top],
        [a.resent_input_tokens for a in top],
    )
    return Chart(
        "tool-cost",
        "Which tools make the agent expensive",
        "Input cost caused by each tool's results: every later service call of the run re-sends "
        "them, and so does every later run while the replay keeps them. Where the provider "
        "reported a service call's usage, its results take their share of what its input was "
        "billed (never more); elsewhere they are priced at the model's input list price, an "
        "estimate shown apart.",
        table,
        figures.figure_json(figure),
        notes,
    )


def result_sizes_chart(sizes: Sequence[ResultSizes]) -> Chart:
    """Distribution of result sizes per tool, largest median first."""
    ordered = sorted(sizes, key=lambda s: (-s.percentiles[50], s.function_name))
    table = Table(
        (
            Column("tool", "Tool", "text"),
            Column("results", "Results"),
            Column("mean", "Mean", "float"),
            Column("min", "Min"),
            *(Column(f"p{p}", f"p{p}") for p in PERCENTILES),
            Column("max", "Max"),
        ),
        tuple(
            (
                s.function_name,
                s.results,
                round(s.mean, 1),
                s.minimum,
                *(s.percentiles[p] for p in PERCENTILES),
                s.maximum,
            )
            for s in ordered
        ),
    )
    figure = figures.result_sizes_figure(
        [s.function_name for s in ordered],
        [s.minimum for s in ordered],
        [s.percentiles[25] for s in ordered],
        [s.percentiles[50] for s in ordered],
        [s.percentiles[75] for s in ordered],
        [s.maximum for s in ordered],
        [s.mean for s in ordered],
    )
    return Chart(
        "result-sizes",
        "Result size per tool",
        "Tokens per tool result: the box spans the middle half (p25 to p75) with the median, "
        "whiskers reach the smallest and largest result. Percentiles are nearest-rank.",
        table,
        figures.figure_json(figure),
        _approximate_note(sizes),
    )


def _approximate_note(sizes: Sequence[ResultSizes]) -> tuple[str, ...]:
    if not any(s.approximate for s in sizes):
        return ()
    return (
        "≈ Over this many calls, the smallest, largest and percentile sizes come from the "
        "roll-ups' sketches: each within 1% of the exact value at its rank.",
    )


def error_rate_chart(activity: Sequence[DailyToolActivity], days: Sequence[date]) -> Chart:
    """Share of calls marked as errors per day: all tools, and the most used tools."""
    calls: dict[tuple[str, date], int] = {}
    errors: dict[tuple[str, date], int] = {}
    volume: dict[str, int] = {}
    for a in activity:
        for name in (ALL_TOOLS, a.function_name):
            calls[(name, a.day)] = calls.get((name, a.day), 0) + a.calls
            errors[(name, a.day)] = errors.get((name, a.day), 0) + a.errors
        volume[a.function_name] = volume.get(a.function_name, 0) + a.calls
    by_volume = sorted(volume, key=lambda n: (-volume[n], n))
    # With one tool (a tool filter) "all tools" would only repeat it.
    overall = [ALL_TOOLS] if len(volume) > 1 else []
    rows = []
    for name in [*overall, *sorted(volume)]:
        for d in days:
            n = calls.get((name, d), 0)
            if n:
                e = errors.get((name, d), 0)
                rows.append((d, name, n, e, round(e / n, 4)))
    table = Table(
        (
            Column("day", "Day", "date"),
            Column("tool", "Tool", "text"),
            Column("calls", "Calls"),
            Column("errors", "Errors"),
            Column("error_rate", "Error rate", "percent"),
        ),
        tuple(rows),
    )
    drawn = [*overall, *by_volume[:TOP_TOOLS]]
    series = {
        name: [
            errors.get((name, d), 0) / calls[(name, d)] if calls.get((name, d)) else None
            for d in days
        ]
        for name in drawn
    }
    notes = ()
    if len(volume) > TOP_TOOLS:
        notes = (
            f"The chart draws the {TOP_TOOLS} most used tools; the table has all {len(volume)}.",
        )
    return Chart(
        "errors",
        "Error rate per day",
        "Share of tool calls the agent marked as errors, per day; a gap is a day without calls.",
        table,
        figures.figure_json(figures.error_rate_figure(_iso(days), series)),
        notes,
    )
