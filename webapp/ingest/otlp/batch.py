"""An export request, read and made ready to store: rows for the raw tables, each with its
normalized, redacted record (docs/otlp-mapping.md, 'What is stored raw'). Pure: the caller
stores the rows.

Duplicates: a span is keyed by (trace id, span id) and carries a digest of what was
received; a log record is keyed by (trace id, span id, fingerprint). The same key twice in one
request keeps the first; the writer compares digests with stored rows the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...redaction import CompiledRules
from ...replay.jsonfast import canonical_utf8
from . import json_reader, protobuf_reader, span_events
from .genai_logs import is_genai_log, normalize_log
from .messages import DEFAULT_PARSE_LIMIT
from .normalize import normalize_span_row, raw_attributes
from .records import Decoded, LogRecord, Span
from .redact import masker, redact_log_rows, redact_records, redact_span_rows

ENCODINGS = ("protobuf", "json")


def _digest(*values: Any) -> str:
    return hashlib.sha256(canonical_utf8(values)).hexdigest()


@dataclass
class SpanRow:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    scope_name: str
    scope_version: str
    service_name: str
    resource: dict[str, Any]
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    links: list[dict[str, Any]]
    record: dict[str, Any]
    digest: str

    @property
    def key(self) -> tuple[str, str]:
        return self.trace_id, self.span_id


@dataclass
class LogRow:
    trace_id: str
    span_id: str
    fingerprint: str
    event_name: str
    time_ns: int
    observed_ns: int
    service_name: str
    attributes: dict[str, Any]
    record: dict[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.trace_id, self.span_id, self.fingerprint


@dataclass
class Batch:
    """What one request holds, ready to store."""

    spans: list[SpanRow] = field(default_factory=list)
    logs: list[LogRow] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped_logs: int = 0  # log records that are not GenAI events: counted, not stored


def decode(signal: str, encoding: str, body: bytes) -> Decoded:
    """Read an export request; `DecodeError` when the body is not one."""
    reader = protobuf_reader if encoding == "protobuf" else json_reader
    return reader.decode_traces(body) if signal == "traces" else reader.decode_logs(body)


def _span_digest(span: Span) -> str:
    return _digest(
        span.parent_span_id,
        span.name,
        span.kind,
        span.start_ns,
        span.end_ns,
        span.status_code,
        span.status_message,
        span.attributes,
        span.events,
        span.links,
        span.scope_name,
        span.scope_version,
        span.resource.attributes,
    )


def _strip_event(
    event: dict[str, Any], mask: Callable[[str], str], limit: int, record: dict[str, Any]
) -> dict[str, Any]:
    attributes = event["attributes"]
    if span_events.read_from(record, event["name"]):
        # Its content lives, parsed and redacted, in the record (span_events.py).
        attributes = {k: v for k, v in attributes.items() if k not in span_events.CONTENT_FIELDS}
    return {**event, "attributes": raw_attributes(attributes, mask, limit)}


def prepare_spans(
    decoded: Decoded,
    rules: CompiledRules,
    limit: int = DEFAULT_PARSE_LIMIT,
    conversation_keys: tuple[str, ...] = (),
) -> Batch:
    out = Batch(rejected=decoded.rejected, errors=list(decoded.errors))
    mask = masker(rules)
    seen: dict[tuple[str, str], str] = {}
    records = []
    for span in decoded.spans:
        digest = _span_digest(span)
        key = (span.trace_id, span.span_id)
        if key in seen:
            if seen[key] != digest:
                out.warnings.append(f"span {span.span_id} sent twice with different content")
            continue
        seen[key] = digest
        record, attributes = normalize_span_row(span, mask, limit, conversation_keys)
        records.append(record)
        out.spans.append(
            SpanRow(
                trace_id=span.trace_id,
                span_id=span.span_id,
                parent_span_id=span.parent_span_id,
                name=span.name,
                kind=span.kind,
                start_ns=span.start_ns,
                end_ns=span.end_ns,
                status_code=span.status_code,
                status_message=span.status_message,
                scope_name=span.scope_name,
                scope_version=span.scope_version,
                service_name=span.resource.service_name,
                resource=span.resource.attributes,
                attributes=attributes,
                events=[_strip_event(e, mask, limit, record) for e in span.events],
                links=span.links,
                record=record,
                digest=digest,
            )
        )
    redact_records(records, rules)
    redact_span_rows(out.spans, rules)
    _warn_oversized(out, records, limit)
    return out


def _results(record: dict[str, Any]) -> list[str]:
    """Every tool result text inside a normalized record."""
    found = [
        part["response"]
        for name in ("input", "output", "input_fallback", "output_fallback")
        for message in record.get(name) or ()
        for part in message["parts"]
        if part["type"] == "tool_call_response" and part["response"] is not None
    ]
    if record.get("message"):
        found += [
            p["response"]
            for p in record["message"]["parts"]
            if p["type"] == "tool_call_response" and p["response"] is not None
        ]
    tool = record.get("tool")
    if tool and tool.get("result") is not None:
        found.append(tool["result"])
    return found


def _warn_oversized(batch: Batch, records: list[dict[str, Any]], limit: int) -> None:
    """Results over the limit are stored cut (marked `otlp:truncated`); the answer says so.
    Worked out from the request alone, so a re-sent request answers the same."""
    sizes = [
        size
        for record in records
        for text in _results(record)
        if (size := len(text.encode("utf-8", "surrogatepass"))) > limit
    ]
    if sizes:
        batch.warnings.append(
            f"{len(sizes)} tool result(s) over the limit of {limit} bytes (largest {max(sizes)}) "
            "are stored cut at the limit"
        )


def _fingerprint(record: LogRecord, ordinal: int) -> str:
    return _digest(
        record.event_name,
        record.time_ns,
        record.observed_ns,
        record.body,
        record.attributes,
        ordinal,
    )


def prepare_logs(decoded: Decoded, rules: CompiledRules, limit: int = DEFAULT_PARSE_LIMIT) -> Batch:
    out = Batch(rejected=decoded.rejected, errors=list(decoded.errors))
    mask = masker(rules)
    ordinals: dict[tuple[str, str], int] = {}
    seen: set[tuple[str, str, str]] = set()
    records = []
    for log in decoded.logs:
        if not is_genai_log(log):
            out.dropped_logs += 1
            continue
        span_key = (log.trace_id, log.span_id)
        ordinal = ordinals[span_key] = ordinals.get(span_key, -1) + 1
        fingerprint = _fingerprint(log, ordinal)
        if (*span_key, fingerprint) in seen:
            continue
        seen.add((*span_key, fingerprint))
        record = normalize_log(log, ordinal, limit)
        records.append(record)
        out.logs.append(
            LogRow(
                trace_id=log.trace_id,
                span_id=log.span_id,
                fingerprint=fingerprint,
                event_name=log.event_name,
                time_ns=log.time_ns,
                observed_ns=log.observed_ns,
                service_name=log.resource.service_name,
                attributes=raw_attributes(log.attributes, mask, limit),
                record=record,
            )
        )
    redact_records(records, rules)
    redact_log_rows(out.logs, rules)
    _warn_oversized(out, records, limit)
    return out
