"""The trace view's model: a conversation's spans grouped by trace, each trace a tree of rows
(parent/child by parent_span_id, indented by depth) with durations, offsets, a timing bar placed
within the trace's own start and end, and bounded attribute text. Pure: the view passes rows in.

The page and its JSON twin stay light whatever was sent: each attribute string longer than
`PREVIEW_CHARS` is shown cut (`attributes_cut`), as the call panel folds long values, and the
span's own page (`span_url`) has its attributes in full (themselves bounded when stored:
docs/otlp-mapping.md, 'What is stored raw'). What was cut when stored is `truncated`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KIND_NAMES = {
    0: "unspecified",
    1: "internal",
    2: "server",
    3: "client",
    4: "producer",
    5: "consumer",
}
STATUS_NAMES = {0: "unset", 1: "ok", 2: "error"}
# Attribute text per span on the page, and characters of each attribute string in the page and
# the JSON twin; the span's page has them in full.
MAX_ATTRIBUTE_CHARS = 4_000
PREVIEW_CHARS = 500
MAX_DEPTH = 32
TRUNCATED = "toolscope.truncated"  # webapp.ingest.otlp.bounds.MARKER


@dataclass(frozen=True, slots=True)
class SpanRow:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    span_class: str
    depth: int
    offset_ms: float
    duration_ms: float
    status: str
    status_message: str
    service_name: str
    scope_name: str
    attributes: dict[str, Any]  # long strings cut to PREVIEW_CHARS
    attributes_cut: bool  # something is cut here: `span_url` has it whole
    truncated: dict[str, Any] | None  # what was cut when stored (place: bytes sent)
    span_url: str
    offset_in_trace_ms: float  # from the start of its trace
    bar_left: float  # the timing bar, in percent of its trace's start-to-end
    bar_width: float
    children: tuple[str, ...]  # span ids of the rows under this one, in order
    attributes_text: str = field(metadata={"json": False})

    @property
    def indent(self) -> int:
        """The depth the page indents to (a deeper span is shown at MAX_DEPTH)."""
        return min(self.depth, MAX_DEPTH)


@dataclass(frozen=True, slots=True)
class TraceGroup:
    """One trace: its header (id, span count, duration, errors, start after the first trace)
    and its rows in tree order."""

    trace_id: str
    span_count: int
    error_count: int
    offset_ms: float  # from the start of the conversation's first trace
    duration_ms: float
    spans: list[SpanRow] = field(metadata={"json": False})


def bar(start_ns: int, end_ns: int, trace_start_ns: int, trace_end_ns: int) -> tuple[float, float]:
    """The timing bar of a span as (left, width) in percent of its trace's start-to-end, within
    0-100 (left + width <= 100) whatever the clocks said; an instant trace has bars of width 0."""
    total = trace_end_ns - trace_start_ns
    if total <= 0:
        return 0.0, 0.0
    left = min(100.0, max(0.0, (start_ns - trace_start_ns) * 100 / total))
    width = max(0.0, (min(end_ns, trace_end_ns) - max(start_ns, trace_start_ns)) * 100 / total)
    left = round(left, 3)
    return left, max(0.0, min(round(width, 3), round(100.0 - left, 3)))


def preview(value: Any, limit: int = PREVIEW_CHARS) -> tuple[Any, bool]:
    """`value` with every string longer than `limit` characters cut (with "…"), and whether
    any was."""
    if isinstance(value, str):
        return (value[:limit] + "…", True) if len(value) > limit else (value, False)
    if isinstance(value, list):
        items = [preview(v, limit) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    if isinstance(value, dict):
        pairs = {k: preview(v, limit) for k, v in value.items()}
        cut = any(c for _, c in pairs.values()) or any(len(k) > limit for k in value)
        return {str(k)[:limit]: v for k, (v, _) in pairs.items()}, cut
    return value, False


def _attributes_text(attributes: dict[str, Any]) -> tuple[str, bool]:
    text = json.dumps(attributes, indent=1, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) <= MAX_ATTRIBUTE_CHARS:
        return text, False
    return text[:MAX_ATTRIBUTE_CHARS], True


def span_rows(
    spans: list[dict[str, Any]], span_url: Callable[[str, str], str] = lambda t, s: ""
) -> list[SpanRow]:
    """All rows in tree order, trace after trace (see `trace_groups`)."""
    return [row for group in trace_groups(spans, span_url) for row in group.spans]


def trace_groups(
    spans: list[dict[str, Any]], span_url: Callable[[str, str], str] = lambda t, s: ""
) -> list[TraceGroup]:
    """The spans grouped by trace (traces by their first start) and each trace's rows in tree
    order: each span after its parent, children by start; a span whose parent is not stored
    (or is its own ancestor) is a root. Every span is one row, the same span sent twice one.
    `span_url(trace_id, span_id)` is the span's own page."""
    by_id: dict[tuple[str, str], dict[str, Any]] = {}
    for span in spans:
        by_id.setdefault((span["trace_id"], span["span_id"]), span)
    ordered = sorted(by_id.values(), key=lambda s: (s["start_ns"], s["end_ns"]))
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in ordered:
        traces.setdefault(span["trace_id"], []).append(span)
    first_start = min((s["start_ns"] for s in ordered), default=0)
    return [
        _group(trace_id, members, first_start, span_url) for trace_id, members in traces.items()
    ]


def _group(
    trace_id: str,
    members: list[dict[str, Any]],
    first_start: int,
    span_url: Callable[[str, str], str],
) -> TraceGroup:
    ids = {s["span_id"] for s in members}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in members:
        parent = span["parent_span_id"]
        parent = parent if parent and parent != span["span_id"] and parent in ids else None
        children.setdefault(parent, []).append(span)
    trace_start = min(s["start_ns"] for s in members)
    trace_end = max(max(s["end_ns"], s["start_ns"]) for s in members)
    order: list[tuple[dict[str, Any], int]] = []
    seen: set[str] = set()
    # Depth first without recursion (a chain of spans may be deep); spans in a cycle of parents,
    # unreachable from a root, start a tree of their own.
    for root in [*children.get(None, ()), *members]:
        stack = [(root, 0)]
        while stack:
            span, depth = stack.pop()
            if span["span_id"] in seen:
                continue
            seen.add(span["span_id"])
            order.append((span, depth))
            kids = children.get(span["span_id"], ())
            stack.extend((kid, depth + 1) for kid in reversed(kids) if kid["span_id"] not in seen)
    kids = _children(order)
    rows = [
        _row(span, depth, first_start, trace_start, trace_end, kids[i], span_url)
        for i, (span, depth) in enumerate(order)
    ]
    return TraceGroup(
        trace_id=trace_id,
        span_count=len(rows),
        error_count=sum(r.status == "error" for r in rows),
        offset_ms=round((trace_start - first_start) / 1e6, 3),
        duration_ms=round((trace_end - trace_start) // 1000 / 1000, 3),
        spans=rows,
    )


def _children(order: list[tuple[dict[str, Any], int]]) -> list[tuple[str, ...]]:
    """Each row's children: the rows that follow it one level deeper before the next row at its
    depth or above (what the page folds away under it)."""
    found: list[list[str]] = [[] for _ in order]
    ancestors: list[int] = []  # indices of the current row's ancestors, nearest last
    for index, (span, depth) in enumerate(order):
        while ancestors and order[ancestors[-1]][1] >= depth:
            ancestors.pop()
        if ancestors:
            found[ancestors[-1]].append(span["span_id"])
        ancestors.append(index)
    return [tuple(kids) for kids in found]


def _row(
    span: dict[str, Any],
    depth: int,
    first_start: int,
    trace_start: int,
    trace_end: int,
    children: tuple[str, ...],
    span_url: Callable[[str, str], str],
) -> SpanRow:
    attributes = dict(span["attributes"] or {})
    truncated = attributes.pop(TRUNCATED, None)
    shown, shown_cut = preview(attributes)
    text, text_cut = _attributes_text(shown)
    left, width = bar(span["start_ns"], span["end_ns"], trace_start, trace_end)
    return SpanRow(
        trace_id=span["trace_id"],
        span_id=span["span_id"],
        parent_span_id=span["parent_span_id"],
        name=span["name"],
        kind=KIND_NAMES.get(span["kind"], str(span["kind"])),
        span_class=span["span_class"],
        depth=depth,
        offset_ms=round((span["start_ns"] - first_start) / 1e6, 3),
        duration_ms=round(max(0, span["end_ns"] - span["start_ns"]) // 1000 / 1000, 3),
        status=STATUS_NAMES.get(span["status_code"], str(span["status_code"])),
        status_message=span["status_message"],
        service_name=span["service_name"],
        scope_name=span["scope_name"],
        attributes=shown,
        attributes_cut=shown_cut or text_cut,
        truncated=truncated if isinstance(truncated, dict) else None,
        span_url=span_url(span["trace_id"], span["span_id"]),
        offset_in_trace_ms=round((span["start_ns"] - trace_start) / 1e6, 3),
        bar_left=left,
        bar_width=width,
        children=children,
        attributes_text=text,
    )
