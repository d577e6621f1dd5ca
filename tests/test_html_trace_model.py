"""The trace view's model, without a database: spans grouped by trace, each trace a tree (every
span once, a child one level under its parent, orphans and cycles at the root) with timing bars
inside the trace's own start and end."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.views.conversations.trace_model import bar, span_rows, trace_groups

MS = 1_000_000


def span(
    trace: str, span_id: str, parent: str = "", start: int = 0, end: int = 0, status: int = 0
) -> dict[str, Any]:
    return {
        "trace_id": trace,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": f"span {span_id}",
        "kind": 1,
        "span_class": "other",
        "start_ns": start,
        "end_ns": end,
        "status_code": status,
        "status_message": "",
        "service_name": "agent",
        "scope_name": "tests",
        "attributes": {},
    }


def test_two_traces_are_two_trees_with_their_own_waterfall():
    spans = [
        span("t2", "c", "", 1000 * MS, 1400 * MS),
        span("t1", "a", "", 0, 100 * MS),
        span("t1", "b", "a", 50 * MS, 100 * MS, status=2),
        span("t2", "d", "c", 1100 * MS, 1200 * MS),
        span("t2", "e", "d", 1150 * MS, 1160 * MS),
        span("t2", "f", "gone", 1300 * MS, 1400 * MS),  # its parent is not stored: a root
    ]
    one, two = trace_groups(spans)
    assert (one.trace_id, one.span_count, one.duration_ms, one.error_count) == ("t1", 2, 100, 1)
    assert (two.trace_id, two.span_count, two.duration_ms, two.offset_ms) == ("t2", 4, 400, 1000)
    assert [(r.span_id, r.depth) for r in one.spans] == [("a", 0), ("b", 1)]
    assert [(r.span_id, r.depth) for r in two.spans] == [("c", 0), ("d", 1), ("e", 2), ("f", 0)]
    assert one.spans[0].children == ("b",) and two.spans[0].children == ("d",)
    b = one.spans[1]
    assert (b.bar_left, b.bar_width, b.offset_in_trace_ms) == (50, 50, 50)
    e = two.spans[2]
    assert (e.bar_left, e.bar_width, e.offset_in_trace_ms, e.offset_ms) == (37.5, 2.5, 150, 1150)
    assert [r.span_id for r in span_rows(spans)] == ["a", "b", "c", "d", "e", "f"]


def test_a_cycle_of_parents_and_a_deep_chain_lose_no_span():
    cycle = [span("t", "x", "y", 0, 10), span("t", "y", "x", 1, 5), span("t", "z", "z", 2, 3)]
    rows = span_rows(cycle)
    assert sorted(r.span_id for r in rows) == ["x", "y", "z"]
    assert [(r.span_id, r.depth) for r in rows] == [("z", 0), ("x", 0), ("y", 1)]
    chain = [span("t", str(n), str(n - 1) if n else "", n, 10_000) for n in range(3000)]
    rows = span_rows(chain)
    assert [r.depth for r in rows] == list(range(3000))
    assert rows[-1].indent == 32


def test_bars_of_an_instant_trace_and_of_clocks_out_of_order():
    assert bar(5, 5, 5, 5) == (0.0, 0.0)
    assert bar(0, 10, 0, 10) == (0.0, 100.0)
    assert bar(10, 4, 0, 10) == (100.0, 0.0)  # ends before it starts


@st.composite
def forests(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Spans of up to three traces, each naming a parent among earlier spans of its trace, a
    span of another trace, a missing one or itself; any start and end."""
    count = draw(st.integers(0, 40))
    spans: list[dict[str, Any]] = []
    for n in range(count):
        trace = draw(st.sampled_from(["t1", "t2", "t3"]))
        parent = draw(
            st.one_of(
                st.just(""),
                st.just("missing"),
                st.just(str(n)),
                st.sampled_from([str(i) for i in range(count)]) if count else st.just(""),
            )
        )
        start = draw(st.integers(0, 10**12))
        end = draw(st.one_of(st.integers(start, start + 10**10), st.integers(0, 10**12)))
        spans.append(span(trace, str(n), parent, start, end, draw(st.sampled_from([0, 1, 2]))))
    return spans


@settings(max_examples=200, deadline=None)
@given(forests())
def test_every_span_once_children_one_deeper_bars_inside(spans):
    groups = trace_groups(spans)
    rows = [r for g in groups for r in g.spans]
    assert sorted((r.trace_id, r.span_id) for r in rows) == sorted(
        (s["trace_id"], s["span_id"]) for s in spans
    )
    assert len({g.trace_id for g in groups}) == len(groups)
    for group in groups:
        assert group.span_count == len(group.spans)
        assert all(r.trace_id == group.trace_id for r in group.spans)
        by_id = {r.span_id: r for r in group.spans}
        assert group.spans == [] or group.spans[0].depth == 0
        for row in group.spans:
            assert 0 <= row.bar_left <= 100 and 0 <= row.bar_width <= 100
            assert row.bar_left + row.bar_width <= 100 + 1e-9
            for child in row.children:
                assert by_id[child].depth == row.depth + 1
                assert by_id[child].parent_span_id == row.span_id
            if row.depth:
                parent = by_id[row.parent_span_id]
                assert row.span_id in parent.children
        # Tree order: each row's children follow it, before the next row at its depth.
        for i, row in enumerate(group.spans[1:], 1):
            assert row.depth <= group.spans[i - 1].depth + 1
