"""The waterfall of one assistant run: each timed tool call as a bar from its start to its end,
one row per call, coloured by round, so parallel calls visibly overlap; a red outline marks
calls that reported an error.

Built as a plain Plotly figure dict (no plotly.graph_objects: validation there costs more than
the page). Plotly renders text as its own small HTML dialect, so every agent-supplied string
that ends up in the figure is HTML-escaped here first.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from ...queries.records import CallRecord

# At most this many bars; a run with more calls shows its first ones.
MAX_BARS = 150
# Okabe-Ito: distinguishable with colour-blindness, readable on light and dark backgrounds.
ROUND_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
ERROR_OUTLINE = "#d62728"
ROW_HEIGHT_PX = 22
LABEL_CHARS = 36


def _label(call: CallRecord) -> str:
    name = call.function_name
    if len(name) > LABEL_CHARS:
        name = name[: LABEL_CHARS - 1] + "…"
    # Plotly decodes &lt; &gt; &amp; but shows &quot; literally: quotes are left as they are
    # (they mean nothing in Plotly's text markup).
    return html.escape(f"{call.round_index}.{call.sequence_index} {name}", quote=False)


def run_waterfall(calls: Sequence[CallRecord]) -> dict[str, Any] | None:
    """The figure for a run's calls, or None when no call has both start and end times."""
    timed = [c for c in calls if c.started_at is not None and c.ended_at is not None][:MAX_BARS]
    if not timed:
        return None
    origin = min(c.started_at for c in timed if c.started_at is not None)
    traces: dict[int, dict[str, Any]] = {}
    for call in timed:
        assert call.started_at is not None and call.ended_at is not None
        trace = traces.setdefault(call.round_index, _round_trace(call.round_index))
        start_ms = (call.started_at - origin).total_seconds() * 1000
        trace["y"].append(_label(call))
        trace["base"].append(round(start_ms, 3))
        trace["x"].append(
            round(max(0.0, (call.ended_at - call.started_at).total_seconds() * 1000), 3)
        )
        trace["marker"]["line"]["width"].append(2 if call.is_error else 0)
    return {
        "data": list(traces.values()),
        "layout": {
            "barmode": "overlay",
            "height": 70 + ROW_HEIGHT_PX * len(timed),
            "margin": {"l": 10, "r": 10, "t": 28 if len(traces) > 1 else 10, "b": 40},
            "xaxis": {"title": {"text": "ms since the first call started"}, "zeroline": True},
            # Categories keep the order of first appearance: calls in (round, sequence) order.
            "yaxis": {"automargin": True, "autorange": "reversed"},
            "showlegend": len(traces) > 1,
            "legend": {
                "orientation": "h",
                "x": 1,
                "xanchor": "right",
                "y": 1,
                "yanchor": "bottom",
            },
            "paper_bgcolor": "rgba(0,0,0,0)",
            "plot_bgcolor": "rgba(0,0,0,0)",
        },
        "config": {
            "displaylogo": False,
            "responsive": True,
            "modeBarButtonsToRemove": ["lasso2d", "select2d"],
        },
    }


def _round_trace(round_index: int) -> dict[str, Any]:
    return {
        "type": "bar",
        "orientation": "h",
        "name": f"round {round_index}",
        "y": [],
        "x": [],
        "base": [],
        "marker": {
            "color": ROUND_COLOURS[round_index % len(ROUND_COLOURS)],
            "line": {"color": ERROR_OUTLINE, "width": []},
        },
        "hovertemplate": (
            "%{y}<br>starts at %{base:.0f} ms, lasts %{x:.0f} ms"
            f"<extra>round {round_index}</extra>"
        ),
    }
