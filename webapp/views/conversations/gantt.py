"""The waterfall of one assistant run: each timed tool call as a bar from its start to its end,
one row per call, coloured by round, so parallel calls visibly overlap; a red outline marks
calls that reported an error. The LLM service calls are bars of their own, in grey, on the row
before their round's calls, so the run's time splits into model time and tool time:

- a service call the agent timed (``started_at``/``ended_at`` on its usage) is drawn as sent;
- otherwise the model's time between two rounds is the gap from the end of the previous round's
  last call to the first request of the next round (calls are requested when the model answers),
  drawn hatched and marked *inferred*. Before the first round and after the last one there is
  no such bound, so nothing is inferred there.

Built as a plain Plotly figure dict (no plotly.graph_objects: validation there costs more than
the page). Plotly renders text as its own small HTML dialect, so every agent-supplied string
that ends up in the figure is HTML-escaped here first.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...queries.records import CallRecord, ServiceCallRecord

# At most this many bars; a run with more calls shows its first ones.
MAX_BARS = 150
# Okabe-Ito: distinguishable with colour-blindness, readable on light and dark backgrounds.
ROUND_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
ERROR_OUTLINE = "#d62728"
MODEL_COLOUR = "#8c8c8c"
ROW_HEIGHT_PX = 22
LABEL_CHARS = 36


def _label(call: CallRecord) -> str:
    name = call.function_name
    if len(name) > LABEL_CHARS:
        name = name[: LABEL_CHARS - 1] + "…"
    # Plotly decodes &lt; &gt; &amp; but shows &quot; literally: quotes are left as they are
    # (they mean nothing in Plotly's text markup).
    return html.escape(f"{call.round_index}.{call.sequence_index} {name}", quote=False)


@dataclass(frozen=True, slots=True)
class ModelSpan:
    round_index: int
    start: datetime
    end: datetime
    inferred: bool
    model: str | None


def model_spans(
    calls: Sequence[CallRecord], usage: Mapping[int, ServiceCallRecord] | None
) -> list[ModelSpan]:
    """The LLM service calls of a run as time spans: timed by the agent, or inferred from the
    gap between two rounds (see the module docstring)."""
    usage = usage or {}
    by_round: dict[int, list[CallRecord]] = {}
    for call in calls:
        by_round.setdefault(call.round_index, []).append(call)
    spans = []
    rounds = sorted(set(by_round) | set(usage))
    for index in rounds:
        record = usage.get(index)
        started, ended = (record.started_at, record.ended_at) if record else (None, None)
        if record and started and ended and ended >= started:
            spans.append(ModelSpan(index, started, ended, False, record.model))
            continue
        previous = by_round.get(index - 1)
        current = by_round.get(index)
        if not previous or not current:
            continue
        ends = [c.ended_at for c in previous if c.ended_at is not None]
        requested = [c.created_at for c in current if c.created_at is not None]
        if len(ends) != len(previous) or not requested:
            continue
        start, end = max(ends), min(requested)
        if end > start:
            spans.append(ModelSpan(index, start, end, True, record.model if record else None))
    return spans


def _union_ms(intervals: list[tuple[datetime, datetime]]) -> float:
    """Wall time covered by at least one interval (parallel calls count once)."""
    total = 0.0
    current: tuple[datetime, datetime] | None = None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += (current[1] - current[0]).total_seconds()
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += (current[1] - current[0]).total_seconds()
    return round(total * 1000, 3)


@dataclass(frozen=True, slots=True)
class RunTiming:
    figure: dict[str, Any] | None
    # Model time (sum of the service calls drawn) and tool time (wall time with a call running).
    model_ms: float | None
    tool_ms: float | None
    inferred: bool


def run_waterfall(
    calls: Sequence[CallRecord], usage: Mapping[int, ServiceCallRecord] | None = None
) -> dict[str, Any] | None:
    """The figure for a run's calls, or None when nothing has both start and end times."""
    return run_timing(calls, usage).figure


def run_timing(
    calls: Sequence[CallRecord], usage: Mapping[int, ServiceCallRecord] | None = None
) -> RunTiming:
    timed = [c for c in calls if c.started_at is not None and c.ended_at is not None][:MAX_BARS]
    spans = model_spans(calls, usage)
    if not timed and not spans:
        return RunTiming(None, None, None, False)
    origin = min([c.started_at for c in timed if c.started_at] + [s.start for s in spans])
    traces: dict[int, dict[str, Any]] = {}
    model_trace = _model_trace()
    span_of = {s.round_index: s for s in spans}
    rows = 0

    def ms(moment: datetime) -> float:
        return round((moment - origin).total_seconds() * 1000, 3)

    def add_span(span: ModelSpan) -> None:
        nonlocal rows
        label = f"{span.round_index}. model" + (" (inferred)" if span.inferred else "")
        model_trace["y"].append(html.escape(label, quote=False))
        duration = round((span.end - span.start).total_seconds() * 1000, 3)
        model_trace["base"].append(ms(span.start))
        model_trace["x"].append(duration)
        model_trace["marker"]["pattern"]["shape"].append("/" if span.inferred else "")
        model_trace["customdata"].append(
            [html.escape(span.model or "model", quote=False), duration]
        )
        rows += 1

    drawn: set[int] = set()
    for call in timed:
        assert call.started_at is not None and call.ended_at is not None
        span = span_of.get(call.round_index)
        if span and call.round_index not in drawn:
            add_span(span)
        drawn.add(call.round_index)
        trace = traces.setdefault(call.round_index, _round_trace(call.round_index))
        trace["y"].append(_label(call))
        duration = round(max(0.0, (call.ended_at - call.started_at).total_seconds() * 1000), 3)
        trace["base"].append(ms(call.started_at))
        trace["x"].append(duration)
        trace["customdata"].append(duration)
        trace["marker"]["line"]["width"].append(2 if call.is_error else 0)
        rows += 1
    for span in spans:  # rounds without timed calls (the final answer) come last
        if span.round_index not in drawn:
            add_span(span)
    data = ([model_trace] if model_trace["y"] else []) + list(traces.values())
    legend = len(data) > 1
    model_ms = (
        round(sum((s.end - s.start).total_seconds() * 1000 for s in spans), 3) if spans else None
    )
    tool_ms = (
        _union_ms([(c.started_at, c.ended_at) for c in timed if c.started_at and c.ended_at])
        if timed
        else None
    )
    figure = {
        "data": data,
        "layout": {
            "barmode": "overlay",
            "height": 70 + ROW_HEIGHT_PX * rows,
            "margin": {"l": 10, "r": 10, "t": 28 if legend else 10, "b": 40},
            "xaxis": {"title": {"text": "ms since the run's first timed step"}, "zeroline": True},
            # Categories keep the order of first appearance: calls in (round, sequence) order.
            "yaxis": {"automargin": True, "autorange": "reversed"},
            "showlegend": legend,
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
    return RunTiming(figure, model_ms, tool_ms, any(s.inferred for s in spans))


# The tooltips read a bar's duration from customdata: for a bar with a base, plotly's %{x} is
# where the bar ends (base + length), not its length.


def _model_trace() -> dict[str, Any]:
    return {
        "type": "bar",
        "orientation": "h",
        "name": "model (LLM call)",
        "y": [],
        "x": [],
        "base": [],
        "customdata": [],
        "marker": {"color": MODEL_COLOUR, "pattern": {"shape": [], "fgcolor": "#ffffff"}},
        "hovertemplate": (
            "%{y}: %{customdata[0]}<br>starts at %{base:.0f} ms, lasts %{customdata[1]:.0f} ms"
            "<extra>LLM service call</extra>"
        ),
    }


def _round_trace(round_index: int) -> dict[str, Any]:
    return {
        "type": "bar",
        "orientation": "h",
        "name": f"round {round_index}",
        "y": [],
        "x": [],
        "base": [],
        "customdata": [],
        "marker": {
            "color": ROUND_COLOURS[round_index % len(ROUND_COLOURS)],
            "line": {"color": ERROR_OUTLINE, "width": []},
        },
        "hovertemplate": (
            "%{y}<br>starts at %{base:.0f} ms, lasts %{customdata:.0f} ms"
            f"<extra>round {round_index}</extra>"
        ),
    }
