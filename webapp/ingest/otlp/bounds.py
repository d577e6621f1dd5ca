"""Every value an export stores is bounded (docs/otlp-mapping.md, 'What is stored raw').

An export of 32 MiB, or of 31 KB gzip holding one 30 MiB attribute, must not grow the database
by more than it is worth, nor make the trace view heavy. After redaction (which reads the values
whole), each raw row is cut:

- every string in it (span, event and scope names, status message, service name, attribute keys
  and values at any depth, in the span's attributes, events, links and resource, and a log
  record's attributes) to `OTLP_MAX_ATTRIBUTE_BYTES`, at a UTF-8 boundary;
- then its raw part (resource, attributes, events, links) to `OTLP_MAX_RAW_SPAN_BYTES` in all:
  the items that do not fit, in their order, are left out;
- the normalized record's texts to `MAX_RESULT_BYTES`, the limit a tool result has in the call
  row. A result is kept one character past the limit, so that the call row's own cut
  (`store._prepared_calls`) still sees it over, cuts it there and marks it `otlp:truncated`.

What was cut is marked in the row's attributes under `toolscope.truncated`: each cut value's
place and its size in bytes as sent, and the places of the items left out; the trace view
shows it. The digest of a span is that of what was sent, so a re-sent export is still known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...replay.jsonfast import dumps
from .batch import Batch

MARKER = "toolscope.truncated"
# The places a marker lists, at most (a span with thousands of cut values names the first).
MAX_MARKED = 20


@dataclass(frozen=True)
class Limits:
    attribute_bytes: int  # OTLP_MAX_ATTRIBUTE_BYTES
    raw_bytes: int  # OTLP_MAX_RAW_SPAN_BYTES
    result_bytes: int  # MAX_RESULT_BYTES


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def cut_text(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, at a character boundary (the same object
    when it fits)."""
    if len(text) * 4 <= limit:
        return text
    data = text.encode("utf-8", "surrogatepass")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def _past(text: str, limit: int) -> str:
    """`text` cut just past `limit` bytes: one character over it."""
    return text[: len(cut_text(text, limit)) + 1]


@dataclass
class _Cuts:
    """What one row lost: {place: bytes as sent}, and the places left out."""

    cut: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    count: int = 0

    def note(self, place: str, size: int) -> None:
        self.count += 1
        if len(self.cut) < MAX_MARKED:
            self.cut[place] = size

    def drop(self, place: str) -> None:
        self.count += 1
        if len(self.dropped) < MAX_MARKED:
            self.dropped.append(place)

    def marker(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.cut)
        if self.dropped:
            out["left out"] = self.dropped
        return out


def _text(value: str, limit: int, place: str, cuts: _Cuts) -> str:
    cut = cut_text(value, limit)
    if cut is not value:
        cuts.note(place, _size(value))
    return cut


def _value(value: Any, limit: int, place: str, cuts: _Cuts) -> Any:
    """`value` (attributes as decoded: at most 32 levels deep) with every string cut; a new
    object only where something was cut."""
    if isinstance(value, str):
        return _text(value, limit, place, cuts)
    if isinstance(value, list):
        items = [_value(v, limit, f"{place}.{i}", cuts) for i, v in enumerate(value)]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, dict):
        return _mapping(value, limit, place, cuts)
    return value


def _mapping(value: dict[str, Any], limit: int, place: str, cuts: _Cuts) -> dict[str, Any]:
    out = {}
    changed = False
    for key, item in value.items():
        new_key = _text(key, limit, f"{place} (a key)", cuts)
        new_item = _value(item, limit, f"{place}.{new_key}", cuts)
        changed = changed or new_key is not key or new_item is not item
        out[new_key] = new_item
    return out if changed else value


def _json_size(value: Any) -> int:
    try:
        return len(dumps(value, allow_nan=False).encode("utf-8", "surrogatepass"))
    except ValueError:
        return len(repr(value))


def _parts_size(parts: list[tuple[str, Any]]) -> int:
    """The sum of each item's `_json_size` plus its place and 4, as `_budget` counts it: one
    JSON text of all the items, less its brackets and commas, rather than one per item."""
    items = [item for _place, item in parts]
    try:
        text = dumps(items, allow_nan=False)
    except ValueError:  # NaN somewhere: item by item, as `_json_size` measures it
        size = sum(map(_json_size, items))
    else:
        size = len(text.encode("utf-8", "surrogatepass")) - 2 - max(len(items) - 1, 0)
    return size + sum(len(place) + 4 for place, _item in parts)


def _budget(parts: list[tuple[str, Any]], limit: int, cuts: _Cuts) -> list[bool]:
    """Which items fit in `limit` bytes, taken in order; the others are noted as left out."""
    kept, used = [], 0
    for place, item in parts:
        size = _json_size(item) + len(place) + 4
        fits = used + size <= limit
        kept.append(fits)
        if fits:
            used += size
        else:
            cuts.drop(place)
    return kept


def _short(value: Any, limit: int) -> bool:
    """Whether no string in `value` (keys included) can be over `limit` UTF-8 bytes, from one
    JSON text of it: no string is longer than the text, nor over 4 bytes a character. Most
    rows are, and walking them string by string cost more than the rest of the bounds."""
    try:
        return len(dumps(value)) * 4 <= limit
    except (TypeError, ValueError):
        return False


_RAW_TEXTS = ("name", "status_message", "scope_name", "scope_version", "service_name")
_RAW_FIELDS = (*_RAW_TEXTS, "resource", "attributes", "events", "links")


def _bound_raw(row: Any, limits: Limits, cuts: _Cuts) -> None:
    """A span row's raw part: strings cut, then the whole kept within `raw_bytes`."""
    limit = limits.attribute_bytes
    raw = [getattr(row, name) for name in _RAW_FIELDS]
    try:
        text: str | None = dumps(raw, allow_nan=False)
    except (TypeError, ValueError):
        text = None  # NaN somewhere (not from a decoder), or not JSON: measured as before
    # `_short`, from the text when there is one.
    short = _short(raw, limit) if text is None else len(text) * 4 <= limit
    if not short:
        _cut_raw(row, limit, cuts)
    elif text is not None and _fits(text, row, limits.raw_bytes):
        return
    parts = (
        [(f"attributes.{k}", v) for k, v in row.attributes.items()]
        + [(f"events.{i}", e) for i, e in enumerate(row.events)]
        + [(f"links.{i}", link) for i, link in enumerate(row.links)]
        + [(f"resource.{k}", v) for k, v in row.resource.items()]
    )
    if _parts_size(parts) <= limits.raw_bytes:
        return
    # Room for the marker itself, which lists at most MAX_MARKED places.
    kept = iter(_budget(parts, max(0, limits.raw_bytes - 8_192), cuts))
    row.attributes = {k: v for k, v in row.attributes.items() if next(kept)}
    row.events = [e for e in row.events if next(kept)]
    row.links = [link for link in row.links if next(kept)]
    row.resource = {k: v for k, v in row.resource.items() if next(kept)}


def _fits(text: str, row: Any, limit: int) -> bool:
    """Whether the raw part's size as `_parts_size` counts it is surely within `limit`, from
    the JSON text of the whole raw part (no NaN in it, nothing cut): each item's JSON is a
    separate piece of that text, and so is each attribute's key, at most 4 UTF-8 bytes a
    character; a place is its key, or an index, and at most 15 characters more. Nearly every
    row fits by far, and encoding its items once more cost a third of the bounds."""
    count = len(row.attributes) + len(row.events) + len(row.links) + len(row.resource)
    return 4 * len(text) + 32 * count <= limit


def _cut_raw(row: Any, limit: int, cuts: _Cuts) -> None:
    """Every string of a span row's raw part cut to `limit`."""
    for name in _RAW_TEXTS:
        setattr(row, name, _text(getattr(row, name), limit, name, cuts))
    row.resource = _mapping(row.resource, limit, "resource", cuts)
    row.attributes = _mapping(row.attributes, limit, "attributes", cuts)
    row.events = [
        {
            **event,
            "name": _text(event["name"], limit, f"events.{i}.name", cuts),
            "attributes": _mapping(event["attributes"], limit, f"events.{i}.attributes", cuts),
        }
        for i, event in enumerate(row.events)
    ]
    row.links = [
        {**link, "attributes": _mapping(link["attributes"], limit, f"links.{i}.attributes", cuts)}
        for i, link in enumerate(row.links)
    ]


_RESULT_KEYS = {("tool_call_response", "response")}


def _bound_record(node: Any, limit: int, place: str, cuts: _Cuts, kind: str = "") -> Any:
    """The normalized record with its texts cut to `limit` (tool results just past it, see the
    module's docstring), in place."""
    if isinstance(node, dict):
        node_kind = node.get("type") if isinstance(node.get("type"), str) else kind
        for key, value in node.items():
            if isinstance(value, str):
                if _size_over(value, limit):
                    result = (node_kind, key) in _RESULT_KEYS or (
                        place == "record.tool" and key == "result"
                    )
                    node[key] = _past(value, limit) if result else cut_text(value, limit)
                    cuts.note(f"{place}.{key}", _size(value))
            elif isinstance(value, dict | list):
                _bound_record(value, limit, f"{place}.{key}", cuts, node_kind)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, str):
                if _size_over(value, limit):
                    node[i] = cut_text(value, limit)
                    cuts.note(f"{place}.{i}", _size(value))
            elif isinstance(value, dict | list):
                _bound_record(value, limit, f"{place}.{i}", cuts, kind)
    return node


def _size_over(text: str, limit: int) -> bool:
    return len(text) > limit // 4 and _size(text) > limit


def bound_batch(batch: Batch, limits: Limits) -> None:
    """Cut every row of `batch` to the limits, in place, marking what was cut; the answer warns
    (worked out from the request alone, so a re-sent export answers the same)."""
    total = 0
    for row in batch.spans:
        cuts = _Cuts()
        if not _short(row.record, limits.result_bytes):
            _bound_record(row.record, limits.result_bytes, "record", cuts)
        _bound_raw(row, limits, cuts)
        if cuts.count:
            row.attributes = {**row.attributes, MARKER: cuts.marker()}
            total += cuts.count
    for log in batch.logs:
        cuts = _Cuts()
        if not _short(log.record, limits.result_bytes):
            _bound_record(log.record, limits.result_bytes, "record", cuts)
        log.attributes = _mapping(log.attributes, limits.attribute_bytes, "attributes", cuts)
        parts = [(f"attributes.{k}", v) for k, v in log.attributes.items()]
        if _parts_size(parts) > limits.raw_bytes:
            kept = iter(_budget(parts, max(0, limits.raw_bytes - 8_192), cuts))
            log.attributes = {k: v for k, v in log.attributes.items() if next(kept)}
        if cuts.count:
            log.attributes = {**log.attributes, MARKER: cuts.marker()}
            total += cuts.count
    if total:
        batch.warnings.append(
            f"{total} value(s) over the storage limits (OTLP_MAX_ATTRIBUTE_BYTES "
            f"{limits.attribute_bytes}, OTLP_MAX_RAW_SPAN_BYTES {limits.raw_bytes}, "
            f"MAX_RESULT_BYTES {limits.result_bytes}) are stored cut, marked {MARKER}"
        )
