"""The trace view's model: a conversation's spans as rows of a tree (indented by depth), with
durations, offsets and bounded attribute text. Pure: the view passes rows in.

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
    attributes_text: str = field(metadata={"json": False})


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
    """Rows in tree order: each span after its parent (when the parent is shown), children by
    start; spans whose parent is not stored are roots. `span_url(trace_id, span_id)` is the
    span's own page."""
    by_id = {(s["trace_id"], s["span_id"]): s for s in spans}
    children: dict[tuple[str, str] | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = (span["trace_id"], span["parent_span_id"]) if span["parent_span_id"] else None
        children.setdefault(parent if parent in by_id else None, []).append(span)
    first_start = min((s["start_ns"] for s in spans), default=0)
    rows: list[SpanRow] = []
    seen: set[tuple[str, str]] = set()

    def visit(span: dict[str, Any], depth: int) -> None:
        key = (span["trace_id"], span["span_id"])
        if key in seen:
            return
        seen.add(key)
        attributes = dict(span["attributes"] or {})
        truncated = attributes.pop(TRUNCATED, None)
        shown, shown_cut = preview(attributes)
        text, text_cut = _attributes_text(shown)
        rows.append(
            SpanRow(
                trace_id=span["trace_id"],
                span_id=span["span_id"],
                parent_span_id=span["parent_span_id"],
                name=span["name"],
                kind=KIND_NAMES.get(span["kind"], str(span["kind"])),
                span_class=span["span_class"],
                depth=min(depth, MAX_DEPTH),
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
                attributes_text=text,
            )
        )
        for child in children.get(key, ()):
            visit(child, depth + 1)

    for root in children.get(None, ()):
        visit(root, 0)
    return rows
