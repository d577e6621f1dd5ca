"""Chart data: the figures' series come from the same rows as the tables and the CSV files.

Pure tests (no database): records in, figure JSON and tables out.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import date, timedelta
from decimal import Decimal

import pytest
from analytics_data import hand_history

from webapp.analytics import conversation_charts, project_charts
from webapp.analytics.attribution import ToolAttribution
from webapp.analytics.context import PARTS, conversation_context
from webapp.analytics.filters import ChartFilters, FilterError, parse_filters
from webapp.analytics.records import DailyToolActivity, DailyUsage, ResultSizes, ServiceCallCost
from webapp.analytics.tables import Chart, Column, Table
from webapp.analytics.windows import ContextWindow, context_window
from webapp.tokens import count_tokens

D1, D2, D3 = date(2025, 3, 10), date(2025, 3, 11), date(2025, 3, 12)


def figure(chart: Chart) -> dict:
    return json.loads(chart.figure_json)


def traces(chart: Chart) -> dict[str, dict]:
    return {t["name"]: t for t in figure(chart)["data"]}


def csv_rows(chart: Chart) -> list[list[str]]:
    return list(csv.reader(io.StringIO(chart.table.to_csv())))


def hand_context():
    history, counts = hand_history()
    return history, conversation_context(history, counts, count=count_tokens, freshness_seconds=300)


# --- conversation charts ----------------------------------------------------------------------


def test_context_chart_stacks_parts_per_service_call() -> None:
    _history, ctx = hand_context()
    chart = conversation_charts.context_chart(ctx, ContextWindow(128_000, "genai-prices"), 1200)
    t = traces(chart)
    labels = ["#1 r0", "#1 r1", "#1 r2", "#2 r0", "#2 r1", "#3 r0"]
    bars = [t[name] for name in ("System", "Tool definitions", "User", "Assistant", "Tool results")]
    assert all(b["type"] == "bar" and b["x"] == labels for b in bars)
    assert t["Tool results"]["y"] == [0, 400, 450, 450, 1450, 0]
    assert t["User"]["y"] == [5, 5, 5, 9, 9, 12]
    assert t["Assistant"]["y"] == [0, 13, 20, 28, 34, 10]
    # The stacked parts add up to the table's total, bar by bar.
    stacked = [sum(values) for values in zip(*(b["y"] for b in bars), strict=True)]
    assert stacked == chart.table.column("total") == [30, 443, 500, 512, 1518, 47]
    assert t["Reported input"]["y"] == [120, 560, 640, 700, 1710, 90]
    assert figure(chart)["layout"]["barmode"] == "stack"
    # Limit lines span the bars; a window far above the largest context starts hidden.
    window = t["Context window (gpt-4o: 128,000)"]
    assert (window["x"], window["y"], window["visible"]) == (
        ["#1 r0", "#3 r0"],
        [128_000, 128_000],
        "legendonly",
    )
    budget = t["Replay budget (1,200)"]
    assert budget["y"] == [1200, 1200] and "visible" not in budget
    assert [p for p in PARTS] == [c.key for c in chart.table.columns[5:10]]


def test_context_window_line_is_shown_when_it_is_close() -> None:
    _history, ctx = hand_context()
    chart = conversation_charts.context_chart(ctx, ContextWindow(4000, "test"), None)
    window = traces(chart)["Context window (gpt-4o: 4,000)"]
    assert window.get("visible", True) is True
    assert not any(name.startswith("Replay budget") for name in traces(chart))


def test_result_tokens_chart_one_bar_per_result_coloured_by_tool() -> None:
    history, ctx = hand_context()
    chart = conversation_charts.result_tokens_chart(ctx, history)
    t = traces(chart)
    assert (t["search"]["x"], t["search"]["y"]) == (["#1 r0.0", "#1 r1.0"], [100, 50])
    assert (t["fetch"]["x"], t["fetch"]["y"]) == (["#1 r0.1", "#2 r0.0"], [300, 1000])
    # Re-sends per result, as attribution counts them (see test_analytics_context).
    assert chart.table.column("sends") == [4, 4, 3, 1]
    assert chart.table.column("resent_input_tokens") == [400, 1200, 150, 1000]
    assert t["fetch"]["customdata"] == [1200, 1000]
    layout = figure(chart)["layout"]
    assert layout["xaxis"]["categoryarray"] == ["#1 r0.0", "#1 r0.1", "#1 r1.0", "#2 r0.0"]


def test_turn_cost_chart_sums_stored_costs_per_turn() -> None:
    _history, ctx = hand_context()
    costs = [
        ServiceCallCost(2, 0, "openai", Decimal("0.0004"), "override", "v"),
        ServiceCallCost(2, 1, "openai", Decimal("0.00124"), "override", "v"),
        ServiceCallCost(2, 2, "openai", Decimal("0.00152"), "override", "v"),
        ServiceCallCost(4, 0, "openai", Decimal("0.00148"), "override", "v"),
        ServiceCallCost(4, 1, "openai", None, None, None),
    ]
    chart = conversation_charts.turn_cost_chart(ctx, costs)
    assert chart.table.rows == (
        (1, 3, 1320, Decimal("0.00316"), 0),
        (2, 2, 2410, Decimal("0.00148"), 1),
        (3, 1, 90, Decimal(0), 1),
    )
    bar = figure(chart)["data"][0]
    assert bar["x"] == ["turn 1", "turn 2", "turn 3"]
    assert bar["y"] == [0.00316, 0.00148, 0.0]
    assert chart.notes == ("2 service calls have no stored cost (unknown model or no usage).",)


# --- project charts ---------------------------------------------------------------------------


def usage_rows() -> list[DailyUsage]:
    return [
        DailyUsage(D1, 6, 3820, 82, 1000, Decimal("0.008296"), 0),
        DailyUsage(D3, 1, 200, 10, 0, Decimal(0), 1),
    ]


def activity_rows() -> list[DailyToolActivity]:
    return [
        DailyToolActivity(D1, "fetch", 2, 0, 2, 1300),
        DailyToolActivity(D1, "search", 2, 0, 2, 150),
        DailyToolActivity(D3, "fetch", 1, 0, 0, 0),
        DailyToolActivity(D3, "search", 1, 1, 1, 40),
    ]


def test_cost_chart_fills_days_without_usage() -> None:
    chart = project_charts.cost_chart(usage_rows(), [D1, D2, D3])
    bar = figure(chart)["data"][0]
    assert bar["x"] == ["2025-03-10", "2025-03-11", "2025-03-12"]
    assert bar["y"] == [0.008296, 0.0, 0.0]
    assert chart.table.column("cost_usd") == [Decimal("0.008296"), Decimal(0), Decimal(0)]
    assert chart.table.column("unpriced_calls") == [0, 0, 1]
    assert "1 service calls have no cost" in chart.notes[0]


def test_tokens_chart_splits_cached_input() -> None:
    chart = project_charts.tokens_chart(usage_rows(), activity_rows(), [D1, D2, D3])
    t = traces(chart)
    assert t["Input (uncached)"]["y"] == [2820, 0, 200]
    assert t["Input (cached)"]["y"] == [1000, 0, 0]
    assert t["Output"]["y"] == [82, 0, 10]
    assert t["Tool results produced"]["y"] == [1450, 0, 40]
    assert chart.table.column("input_tokens") == [3820, 0, 200]


def test_tool_cost_chart_most_expensive_first() -> None:
    rows = [
        ToolAttribution("fetch", 2, 1300, 5, 2200, Decimal("0.0044"), 0, Decimal("0.0004")),
        ToolAttribution("search", 3, 190, 8, 590, Decimal("0.00118"), 0),
    ]
    chart = project_charts.tool_cost_chart(rows)
    bar = figure(chart)["data"][0]
    assert (bar["y"], bar["x"], bar["customdata"]) == (
        ["fetch", "search"],
        [0.0044, 0.00118],
        [2200, 590],
    )
    assert figure(chart)["layout"]["yaxis"]["autorange"] == "reversed"  # first on top
    assert csv_rows(chart) == [
        [
            "tool",
            "attributed_cost_usd",
            "billed_cost_usd",
            "estimated_cost_usd",
            "resent_input_tokens",
            "sends",
            "results",
            "result_tokens",
            "unpriced_input_tokens",
        ],
        ["fetch", "0.0044", "0.0040", "0.0004", "2200", "5", "2", "1300", "0"],
        ["search", "0.00118", "0.00118", "0", "590", "8", "3", "190", "0"],
    ]


def test_result_sizes_chart_boxes_from_percentiles() -> None:
    sizes = [
        ResultSizes("search", 3, 63.33, 40, 100, {25: 40, 50: 50, 75: 100, 90: 100}),
        ResultSizes("fetch", 2, 650.0, 300, 1000, {25: 300, 50: 300, 75: 1000, 90: 1000}),
    ]
    chart = project_charts.result_sizes_chart(sizes)
    box = figure(chart)["data"][0]
    assert box["type"] == "box"
    assert box["x"] == ["fetch", "search"]  # largest median first
    assert (box["lowerfence"], box["q1"], box["median"], box["q3"], box["upperfence"]) == (
        [300, 40],
        [300, 40],
        [300, 50],
        [1000, 100],
        [1000, 100],
    )
    assert chart.table.rows[0] == ("fetch", 2, 650.0, 300, 300, 300, 1000, 1000, 1000)
    # Sizes span orders of magnitude: one large tool must not flatten the others.
    assert figure(chart)["layout"]["yaxis"]["type"] == "log"


def test_result_sizes_of_zero_are_drawn_at_one_on_the_log_axis() -> None:
    sizes = [ResultSizes("empty", 2, 0.0, 0, 0, {25: 0, 50: 0, 75: 0, 90: 0})]
    box = figure(project_charts.result_sizes_chart(sizes))["data"][0]
    assert box["lowerfence"] == box["median"] == box["upperfence"] == [1]


def test_error_rate_chart_has_gaps_on_days_without_calls() -> None:
    chart = project_charts.error_rate_chart(activity_rows(), [D1, D2, D3])
    t = traces(chart)
    assert t["(all tools)"]["y"] == [0.0, None, 0.5]
    assert t["search"]["y"] == [0.0, None, 1.0]
    assert t["fetch"]["y"] == [0.0, None, 0.0]
    assert chart.table.rows == (
        (D1, "(all tools)", 4, 0, 0.0),
        (D3, "(all tools)", 2, 1, 0.5),
        (D1, "fetch", 2, 0, 0.0),
        (D3, "fetch", 1, 0, 0.0),
        (D1, "search", 2, 0, 0.0),
        (D3, "search", 1, 1, 1.0),
    )


def test_agent_text_is_escaped_in_figures_and_csv() -> None:
    evil = '<a href="javascript:alert(1)">x</a>'
    rows = [ToolAttribution(evil, 1, 10, 1, 10, Decimal("0.1"), 0)]
    chart = project_charts.tool_cost_chart(rows)
    assert figure(chart)["data"][0]["y"] == ['&lt;a href="javascript:alert(1)"&gt;x&lt;/a&gt;']
    assert "<a " not in chart.figure_json
    assert chart.table.column("tool") == [evil]  # the table keeps it raw; Jinja escapes it
    formula = Table((Column("tool", "Tool", "text"),), (("=HYPERLINK(1)",), ("-x",), ("ok",)))
    assert formula.to_csv().splitlines() == ["tool", "'=HYPERLINK(1)", "'-x", "ok"]


def test_csv_rows_equal_the_table_and_json() -> None:
    chart = project_charts.tokens_chart(usage_rows(), activity_rows(), [D1, D2, D3])
    rows = csv_rows(chart)
    assert rows[0] == [c.key for c in chart.table.columns]
    assert rows[1:] == [[str(v) for v in r.values()] for r in chart.table.records()]
    assert chart.to_dict()["rows"][0] == {
        "day": "2025-03-10",
        "input_tokens": 3820,
        "cached_tokens": 1000,
        "output_tokens": 82,
        "tool_result_tokens": 1450,
    }


def test_error_rate_axis_ticks_show_fractions_of_a_percent() -> None:
    chart = project_charts.error_rate_chart(activity_rows(), [D1, D2, D3])
    # ".0%" printed 0.002 as "0%" on every tick of a low error rate.
    assert figure(chart)["layout"]["yaxis"]["tickformat"] == ".2~%"


def test_error_rate_of_a_single_tool_is_not_repeated_as_all_tools() -> None:
    only = [a for a in activity_rows() if a.function_name == "search"]
    chart = project_charts.error_rate_chart(only, [D1, D2, D3])
    assert list(traces(chart)) == ["search"]
    assert set(chart.table.column("tool")) == {"search"}


def test_table_refuses_ragged_rows() -> None:
    with pytest.raises(ValueError, match="2 values for 1 columns"):
        Table((Column("a", "A"),), ((1, 2),))


# --- filters and windows ----------------------------------------------------------------------


def test_filters_default_to_the_last_30_days() -> None:
    f = parse_filters({}, date(2025, 3, 31))
    assert (f.date_from, f.date_to, f.channel, f.tool) == (
        date(2025, 3, 2),
        date(2025, 3, 31),
        None,
        None,
    )
    assert len(f.days) == 30
    assert f.end - f.start == timedelta(days=30)
    assert f.preset(7) == {"from": "2025-03-25", "to": "2025-03-31"}
    f = parse_filters({"from": "2025-01-01", "to": "2025-01-02", "tool": " fetch "}, date.today())
    assert f == ChartFilters(date(2025, 1, 1), date(2025, 1, 2), None, "fetch")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"from": "yesterday"}, "from"),
        ({"to": "2025-13-01"}, "to"),
        ({"from": "2025-02-01", "to": "2025-01-01"}, "from"),
        ({"from": "1990-01-01", "to": "2025-01-01"}, "from"),
        ({"tool": "x" * 256}, "tool"),
    ],
)
def test_bad_filters_name_the_field(args: dict[str, str], field: str) -> None:
    with pytest.raises(FilterError) as info:
        parse_filters(args, date(2025, 3, 31))
    assert info.value.field == field


def test_context_windows_come_from_the_price_data_then_the_fallback_table() -> None:
    assert context_window("gpt-4o").tokens == 128_000  # type: ignore[union-attr]
    assert context_window("openai/gpt-4.1").tokens == 1_000_000  # type: ignore[union-attr]
    assert context_window("claude-sonnet-4-5").tokens == 200_000  # type: ignore[union-attr]
    assert context_window("gpt-4o").source.startswith("genai-prices ")  # type: ignore[union-attr]
    fallback = context_window("meta-llama/Llama-3.3-70B-Instruct")
    assert fallback == ContextWindow(131_072, "Meta Llama 3.x model cards")
    assert context_window("my-own-llm") is None
    assert context_window(None) is None


def test_the_context_caption_calls_the_gap_framing_only_when_it_is() -> None:
    """Issue 23: the demo's reported input was 3-6 times the counted context under a caption
    that called the gap "a few tokens of framing"; the caption now says what the data shows."""
    import dataclasses

    _history, ctx = hand_context()
    chart = conversation_charts.context_chart(ctx, None, None)
    assert "a few tokens of framing per message" in chart.notes[0]  # 120 vs 30 ... 1710 vs 1518
    far = dataclasses.replace(
        ctx,
        bars=tuple(
            dataclasses.replace(b, reported_input_tokens=b.total * (3 if b.position % 2 else 6))
            for b in ctx.bars
        ),
    )
    note = conversation_charts.context_chart(far, None, None).notes[0]
    assert "framing per message" not in note
    # The two smallest (30 and 47 tokens) are within the 200 tokens framing may add.
    assert "On 4 of 6 service calls the reported input is 3-6 times the counted context" in note
    assert conversation_charts.framing_explains(1_000 + 4 * 20, 1_000)
    assert not conversation_charts.framing_explains(3_000, 1_000)
    unreported = dataclasses.replace(
        ctx, bars=tuple(dataclasses.replace(b, reported_input_tokens=None) for b in ctx.bars)
    )
    assert (
        "no service call reported"
        in conversation_charts.context_chart(unreported, None, None).notes[0]
    )
