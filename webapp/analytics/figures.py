"""Plotly figures built in Python from plain data (pure functions, no Flask, no database).

Every function returns a :class:`plotly.graph_objects.Figure`; pages embed ``figure_json(fig)``
and ``static/js/toolscope.js`` draws it with the plotly.js that Toolscope serves itself.

Text that comes from agents (tool names, message ids, model names) is HTML-escaped before it
goes into a figure: plotly.js turns a few HTML-like tags in labels into SVG elements (links
included) and decodes entities back for display, so escaped text shows as typed and stays inert.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import plotly.graph_objects as go

__all__ = [
    "PART_COLOURS",
    "PART_LABELS",
    "context_figure",
    "cost_per_day_figure",
    "error_rate_figure",
    "figure_json",
    "result_sizes_figure",
    "result_tokens_figure",
    "safe",
    "tokens_per_day_figure",
    "tool_cost_figure",
    "turn_cost_figure",
]

PART_LABELS = {
    "system": "System",
    "tool_definitions": "Tool definitions",
    "user": "User",
    "assistant": "Assistant",
    "tool_results": "Tool results",
}
PART_COLOURS = {
    "system": "#94a3b8",
    "tool_definitions": "#a78bfa",
    "user": "#60a5fa",
    "assistant": "#34d399",
    "tool_results": "#f59e0b",
}
# A palette that reads on light and dark backgrounds (Tableau 10).
COLOURWAY = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


# Kept small on purpose: the default template would add ~8 KB to every figure. Built on the first
# chart, not at import: building any plotly object loads plotly's validators (~14 MB), which a
# server process that only ingests (gunicorn's master, most workers) never needs.
@cache
def _template() -> go.layout.Template:
    return go.layout.Template(
        layout={
            "font": {
                "family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif",
                "size": 12,
            },
            "colorway": list(COLOURWAY),
            "paper_bgcolor": "rgba(0,0,0,0)",
            "plot_bgcolor": "rgba(0,0,0,0)",
            "xaxis": {"gridcolor": "rgba(128,128,128,0.2)", "zeroline": False},
            "yaxis": {"gridcolor": "rgba(128,128,128,0.2)", "zeroline": False},
        }
    )


# No logo, no "edit in Chart Studio" (which would talk to plot.ly): nothing leaves the machine.
CONFIG = {"responsive": True, "displaylogo": False, "showEditInChartStudio": False}
# Money axes: "$0.00008", not plotly's SI "$80µ"; never below zero, even when all values are 0.
USD_AXIS = {"tickprefix": "$", "exponentformat": "none", "rangemode": "nonnegative"}
COUNT_AXIS = {"rangemode": "nonnegative"}
# When the model's window is this many times the largest context, its line starts hidden
# (a click on the legend shows it) so the bars are not flattened against the axis.
WINDOW_HIDDEN_RATIO = 10


def safe(text: str | None) -> str:
    """Agent-supplied text, escaped for plotly's HTML-like labels."""
    return html.escape(text or "", quote=False)


def figure_json(fig: go.Figure) -> str:
    """The figure as JSON text, with the config the pages use."""
    data = json.loads(fig.to_json())
    data["config"] = CONFIG
    return json.dumps(data, separators=(",", ":"))


def _layout(fig: go.Figure, *, y_title: str, x_title: str = "", **extra: Any) -> go.Figure:
    extra.setdefault("yaxis", COUNT_AXIS)  # every chart counts or sums something >= 0
    fig.update_layout(
        template=_template(),
        height=extra.pop("height", 340),
        margin={"l": 64, "r": 16, "t": 16, "b": 48},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        xaxis_title=x_title or None,
        yaxis_title=y_title,
        **extra,
    )
    return fig


def _floats(values: Sequence[Any]) -> list[float | None]:
    return [None if v is None else float(v) for v in values]


# --- project charts ---------------------------------------------------------------------------


def cost_per_day_figure(days: Sequence[str], cost_usd: Sequence[Any]) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=list(days),
            y=_floats(cost_usd),
            name="Cost",
            marker_color=COLOURWAY[0],
            hovertemplate="%{x|%Y-%m-%d}<br>$%{y:,.4f}<extra></extra>",
        )
    )
    return _layout(fig, y_title="USD", xaxis={"type": "date"}, yaxis=USD_AXIS)


def tokens_per_day_figure(
    days: Sequence[str],
    uncached_input: Sequence[int],
    cached_input: Sequence[int],
    output: Sequence[int],
    tool_results: Sequence[int],
) -> go.Figure:
    """Reported tokens stacked per day, and the tool-result tokens produced that day as a line."""
    x = list(days)
    fig = go.Figure(
        [
            go.Bar(x=x, y=list(uncached_input), name="Input (uncached)", marker_color="#4e79a7"),
            go.Bar(x=x, y=list(cached_input), name="Input (cached)", marker_color="#a0cbe8"),
            go.Bar(x=x, y=list(output), name="Output", marker_color="#59a14f"),
            go.Scatter(
                x=x,
                y=list(tool_results),
                name="Tool results produced",
                mode="lines+markers",
                line={"color": PART_COLOURS["tool_results"], "width": 2},
            ),
        ]
    )
    return _layout(
        fig, y_title="tokens", barmode="stack", hovermode="x unified", xaxis={"type": "date"}
    )


def tool_cost_figure(
    tools: Sequence[str], cost_usd: Sequence[Any], resent_tokens: Sequence[int]
) -> go.Figure:
    """Horizontal bars, most expensive on top; tokens in the hover (they matter when unpriced)."""
    names = [safe(t) for t in tools]
    fig = go.Figure(
        go.Bar(
            x=_floats(cost_usd),
            y=names,
            orientation="h",
            name="Attributed input cost",
            marker_color=PART_COLOURS["tool_results"],
            customdata=list(resent_tokens),
            hovertemplate="%{y}<br>$%{x:,.6f}<br>%{customdata:,} input tokens<extra></extra>",
        )
    )
    return _layout(
        fig,
        y_title="",
        x_title="USD of input caused by the tool's results",
        height=max(220, 60 + 28 * len(names)),
        yaxis={"autorange": "reversed", "type": "category", "automargin": True},
        xaxis=USD_AXIS,
    )


def result_sizes_figure(
    tools: Sequence[str],
    minimum: Sequence[int],
    p25: Sequence[int],
    median: Sequence[int],
    p75: Sequence[int],
    maximum: Sequence[int],
    mean: Sequence[float],
) -> go.Figure:
    """One box per tool from precomputed statistics (whiskers at min and max), on a log axis:
    result sizes span orders of magnitude (a 1 MB page next to 20-token lookups), and on a
    linear axis one large tool flattens every other box. A log axis has no zero: sizes below
    one token are drawn at one."""
    names = [safe(t) for t in tools]

    def floor(values: Sequence[float]) -> list[float]:
        return [max(1, v) for v in values]

    fig = go.Figure(
        go.Box(
            x=names,
            lowerfence=floor(minimum),
            q1=floor(p25),
            median=floor(median),
            q3=floor(p75),
            upperfence=floor(maximum),
            mean=floor(mean),
            name="Result tokens",
            marker_color=PART_COLOURS["tool_results"],
            boxpoints=False,
        )
    )
    return _layout(
        fig,
        y_title="tokens per result (log scale)",
        showlegend=False,
        height=max(300, 200 + 12 * len(names)),
        xaxis={"type": "category", "automargin": True},
        # Plotly's autorange leaves a precomputed box at the top half outside the plot: the
        # range is set here, in powers of ten, from one token to above the largest result.
        yaxis={
            "type": "log",
            "dtick": 1,
            "tickformat": ",d",
            "range": [-0.1, math.log10(max([1, *maximum])) + 0.3],
        },
    )


def error_rate_figure(
    days: Sequence[str], series: Mapping[str, Sequence[float | None]]
) -> go.Figure:
    """One line per series (all tools first); a day without calls is a gap, not a zero."""
    fig = go.Figure(
        [
            go.Scatter(
                x=list(days),
                y=list(values),
                name=safe(name),
                mode="lines+markers",
                connectgaps=False,
                cliponaxis=False,  # a 0% marker sits on the axis; draw it whole
                line={"width": 3 if i == 0 else 1.5},
                hovertemplate="%{y:.1%}",
            )
            for i, (name, values) in enumerate(series.items())
        ]
    )
    return _layout(
        fig,
        y_title="error rate",
        hovermode="x unified",
        xaxis={"type": "date"},
        # Rates are fractions, often well under 1%: ".0%" read "0%" on every tick. Up to two
        # decimals, trailing zeros trimmed ("0.25%", "1%").
        yaxis={"tickformat": ".2~%", "rangemode": "tozero"},
    )


# --- conversation charts ----------------------------------------------------------------------


def context_figure(
    labels: Sequence[str],
    parts: Mapping[str, Sequence[int]],
    reported: Sequence[int | None],
    window: tuple[int, str] | None,
    budget: int | None,
) -> go.Figure:
    """One stacked bar per service call, the reported input as markers, and limit lines.

    ``window`` is (tokens, label); ``budget`` the replay's context budget. Lines are traces, not
    shapes, so a click on the legend hides them and the axis rescales.
    """
    x = list(labels)
    traces: list[Any] = [
        go.Bar(
            x=x,
            y=list(values),
            name=PART_LABELS[part],
            marker_color=PART_COLOURS[part],
            hovertemplate=f"{PART_LABELS[part]}: %{{y:,}}<extra></extra>",
        )
        for part, values in parts.items()
    ]
    if any(v is not None for v in reported):
        traces.append(
            go.Scatter(
                x=x,
                y=list(reported),
                name="Reported input",
                mode="markers",
                marker={"symbol": "line-ew-open", "size": 14, "line": {"width": 2}},
                marker_color="#e15759",
                hovertemplate="Reported input: %{y:,}<extra></extra>",
            )
        )
    largest = max((sum(v) for v in zip(*parts.values(), strict=True)), default=0)
    ends = [x[0], x[-1]] if x else []
    if window is not None and ends:
        tokens, label = window
        traces.append(
            go.Scatter(
                x=ends,
                y=[tokens, tokens],
                name=f"Context window ({safe(label)}: {tokens:,})",
                mode="lines",
                line={"color": "#e15759", "dash": "dash", "width": 2},
                hoverinfo="skip",
                visible="legendonly" if tokens > WINDOW_HIDDEN_RATIO * largest else True,
            )
        )
    if budget is not None and ends:
        traces.append(
            go.Scatter(
                x=ends,
                y=[budget, budget],
                name=f"Replay budget ({budget:,})",
                mode="lines",
                line={"color": "#b07aa1", "dash": "dot", "width": 2},
                hoverinfo="skip",
            )
        )
    fig = go.Figure(traces)
    return _layout(
        fig,
        y_title="tokens in the input",
        x_title="service call (#run, round)",
        barmode="stack",
        hovermode="x unified",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": x},
    )


def result_tokens_figure(
    labels: Sequence[str], tools: Sequence[str], tokens: Sequence[int], resent: Sequence[int]
) -> go.Figure:
    """One bar per tool result in conversation order, one colour (trace) per tool."""
    order: dict[str, list[int]] = {}
    for i, tool in enumerate(tools):
        order.setdefault(tool, []).append(i)
    fig = go.Figure(
        [
            go.Bar(
                x=[labels[i] for i in idx],
                y=[tokens[i] for i in idx],
                customdata=[resent[i] for i in idx],
                name=safe(tool),
                hovertemplate=safe(tool)
                + ": %{y:,} tokens<br>re-sent as %{customdata:,} input tokens<extra></extra>",
            )
            for tool, idx in order.items()
        ]
    )
    return _layout(
        fig,
        y_title="tokens per result",
        x_title="tool result (#run, round.sequence)",
        xaxis={"type": "category", "categoryorder": "array", "categoryarray": list(labels)},
    )


def turn_cost_figure(
    turns: Sequence[str], cost_usd: Sequence[Any], input_tokens: Sequence[int]
) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=list(turns),
            y=_floats(cost_usd),
            name="Cost",
            marker_color=COLOURWAY[0],
            customdata=list(input_tokens),
            hovertemplate="%{x}<br>$%{y:,.6f}<br>%{customdata:,} input tokens<extra></extra>",
        )
    )
    return _layout(
        fig,
        y_title="USD",
        x_title="turn",
        yaxis=USD_AXIS,
        xaxis={"type": "category"},
    )
