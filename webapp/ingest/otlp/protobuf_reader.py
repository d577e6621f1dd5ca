"""OTLP protobuf bodies → `records`, with the official `opentelemetry-proto` classes.

The messages are walked directly: `MessageToDict` would build a dict of the whole request first
and is several times slower. A body nested deeper than the runtime parses is read with its deep
values cut, as OTLP/JSON's are (`wire.parse`); a span or log record whose time cannot be stored
(a fixed64 of 2^63 or more) or whose end is before its start is rejected, the rest kept.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .records import (
    MAX_DEPTH,
    TOO_DEEP,
    Decoded,
    DecodeError,
    LogRecord,
    Refused,
    Resource,
    Span,
    check_span_id,
    check_time,
    check_times,
    check_trace_id,
    event_name,
)
from .wire import parse


def _label(name: str) -> str:
    return repr(name if len(name) <= 60 else name[:60] + "...")


def _parse(message: Any, body: bytes) -> Any:
    try:
        parse(message, body)
    except (ProtobufDecodeError, RuntimeError, ValueError) as exc:
        # RuntimeError: the library's recursion limit on nested messages.
        raise DecodeError(f"not a valid OTLP protobuf message: {exc}") from None
    return message


def any_value(value: Any, depth: int = 0) -> Any:
    """An AnyValue as a Python value (docs/otlp-mapping.md, 'Decoding')."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return _double(value.double_value)
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if kind == "array_value":
        return [any_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def _double(value: float) -> float | str:
    # JSON (and so the stored raw row) has no NaN or Infinity: keep them as OTLP/JSON spells them.
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def attributes(items: Any) -> dict[str, Any]:
    # Later duplicate keys win, as in a dict literal.
    return {kv.key: any_value(kv.value) for kv in items}


def decode_traces(body: bytes) -> Decoded:
    request = _parse(ExportTraceServiceRequest(), body)
    out = Decoded()
    for resource_spans in request.resource_spans:
        resource = Resource(attributes(resource_spans.resource.attributes))
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            for span in scope_spans.spans:
                trace_id = check_trace_id(span.trace_id)
                span_id = check_span_id(span.span_id)
                if trace_id is None or span_id is None:
                    which = "trace id" if trace_id is None else "span id"
                    out.reject(f"span {_label(span.name)}: invalid {which}")
                    continue
                try:
                    check_times(span.start_time_unix_nano, span.end_time_unix_nano, "the span")
                    for e in span.events:
                        check_time(e.time_unix_nano, "an event's time")
                except Refused as exc:
                    out.reject(f"span {_label(span.name)}: {exc}")
                    continue
                out.spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=span_id,
                        parent_span_id=check_span_id(span.parent_span_id) or "",
                        name=span.name,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status_code=span.status.code,
                        status_message=span.status.message,
                        attributes=attributes(span.attributes),
                        events=[
                            {
                                "name": e.name,
                                "time_ns": e.time_unix_nano,
                                "attributes": attributes(e.attributes),
                            }
                            for e in span.events
                        ],
                        links=[
                            {
                                "trace_id": link.trace_id.hex(),
                                "span_id": link.span_id.hex(),
                                "attributes": attributes(link.attributes),
                            }
                            for link in span.links
                        ],
                        scope_name=scope.name,
                        scope_version=scope.version,
                        resource=resource,
                    )
                )
    return out


def decode_logs(body: bytes) -> Decoded:
    request = _parse(ExportLogsServiceRequest(), body)
    out = Decoded()
    for resource_logs in request.resource_logs:
        resource = Resource(attributes(resource_logs.resource.attributes))
        for scope_logs in resource_logs.scope_logs:
            scope = scope_logs.scope
            for record in scope_logs.log_records:
                try:
                    check_time(record.time_unix_nano, "timeUnixNano")
                    check_time(record.observed_time_unix_nano, "observedTimeUnixNano")
                except Refused as exc:
                    out.reject(f"log record: {exc}")
                    continue
                attrs = attributes(record.attributes)
                trace_id = check_trace_id(record.trace_id)
                span_id = check_span_id(record.span_id)
                if trace_id is None or span_id is None:
                    trace_id = span_id = None  # stored, but attached to no span
                out.logs.append(
                    LogRecord(
                        trace_id=trace_id or "",
                        span_id=span_id or "",
                        event_name=event_name(record.event_name, attrs),
                        time_ns=record.time_unix_nano or record.observed_time_unix_nano,
                        observed_ns=record.observed_time_unix_nano,
                        severity_number=record.severity_number,
                        body=any_value(record.body) if record.HasField("body") else None,
                        attributes=attrs,
                        scope_name=scope.name,
                        scope_version=scope.version,
                        resource=resource,
                    )
                )
    return out
