"""OTLP/JSON bodies → `records`: a small reader over `json.loads`.

OTLP/JSON is not protobuf's canonical JSON mapping, so `json_format.Parse` cannot read it: ids
are hex (some exporters send base64, also accepted), int64 values come as strings or numbers,
enums as numbers (names accepted too), and unknown fields are ignored. The pre-1.0 names
`instrumentationLibrarySpans`/`instrumentationLibraryLogs` are read as well.

A body whose shape is wrong (a list where an object belongs) is a `DecodeError`; a span or log
record that cannot be stored as sent (a bad id, a time that is not an integer from 0 to 2^63 - 1,
an end before its start, a wrong shape inside it) is rejected and counted, and the rest is kept.
Values that JSON allows and the OTLP types do not are repaired and counted (the answer's
warnings): a lone UTF-16 surrogate (`"\\ud83d"`, a string cut inside an emoji) becomes U+FFFD,
and an `intValue` that is not a 64-bit integer is kept as the text sent
(docs/otlp-mapping.md, 'Decoding').
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

from .records import (
    MAX_DEPTH,
    SPAN_KINDS,
    STATUS_CODES,
    SURROGATE_ESCAPE,
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
    replace_surrogates,
)

_HEX = re.compile(r"[0-9a-fA-F]*")
INT_AS_TEXT = (
    "attribute value(s) with an intValue that is not a 64-bit integer, stored as the text sent"
)
SURROGATES = "lone UTF-16 surrogate(s) in strings, stored as U+FFFD"


def _load(body: bytes, out: Decoded) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # ValueError covers UnicodeDecodeError: the body is not UTF-8 text.
        raise DecodeError(f"malformed JSON: {exc}") from None
    if not isinstance(document, dict):
        raise DecodeError("an OTLP/JSON export request must be a JSON object")
    if SURROGATE_ESCAPE.search(body):
        replaced = replace_surrogates(document)
        if replaced:
            out.repaired(SURROGATES, replaced)
    return document


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DecodeError(f"{where}: expected a list")
    return value


def _obj(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DecodeError(f"{where}: expected an object")
    return value


def _time(value: Any, where: str) -> int:
    """A time (fixed64 nanoseconds): an integer from 0 to 2^63 - 1, as a number or a decimal
    string; absent is 0. Anything else is `Refused`: never stored as another value."""
    try:
        number = _int(value, where)
    except DecodeError:
        raise Refused(f"{where}: expected an integer in nanoseconds, got {value!r:.40}") from None
    return check_time(number, where)


def _int64(value: Any) -> int | None:
    """An intValue: a 64-bit integer, as a number or a decimal string; else None."""
    try:
        number = _int(value, "intValue")
    except DecodeError:
        return None
    return number if -(2**63) <= number < 2**63 else None


def _int(value: Any, where: str) -> int:
    """An int64/uint64/enum field: a number or a decimal string; absent is 0."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise DecodeError(f"{where}: expected an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and len(value) <= 64:
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise DecodeError(f"{where}: expected an integer, got {value!r:.40}")


def _enum(value: Any, names: dict[str, int], where: str) -> int:
    if isinstance(value, str) and value in names:
        return names[value]
    return _int(value, where)


def _severity(value: Any) -> int:
    # Only shown, never interpreted: an enum name or a stray value is not worth a 400.
    try:
        return _int(value, "severityNumber")
    except DecodeError:
        return 0


def _str(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DecodeError(f"{where}: expected a string")
    return value


def _id_bytes(value: Any) -> bytes:
    """An id's bytes: hex (the OTLP/JSON rule), else base64 (protobuf's JSON mapping)."""
    if not isinstance(value, str) or not value:
        return b""
    if len(value) % 2 == 0 and _HEX.fullmatch(value):
        return bytes.fromhex(value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return b"\xff"  # neither: a wrong length, so the caller rejects it


def any_value(value: Any, depth: int = 0, out: Decoded | None = None) -> Any:
    """An OTLP/JSON AnyValue as a Python value (docs/otlp-mapping.md, 'Decoding'); `out`
    counts the repairs."""
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value:
        v = value["stringValue"]
        return v if isinstance(v, str) else str(v)
    if "intValue" in value:
        v = value["intValue"]
        number = _int64(v)
        if number is not None or v is None:
            return number
        if out is not None:
            out.repaired(INT_AS_TEXT)
        return v if isinstance(v, str) else json.dumps(v)
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    if "arrayValue" in value:
        items = value["arrayValue"]
        items = items.get("values") if isinstance(items, dict) else None
        return [any_value(v, depth + 1, out) for v in items] if isinstance(items, list) else []
    if "kvlistValue" in value:
        items = value["kvlistValue"]
        items = items.get("values") if isinstance(items, dict) else None
        return _kv_pairs(items if isinstance(items, list) else [], depth + 1, out)
    if "bytesValue" in value:
        v = value["bytesValue"]
        return v if isinstance(v, str) else None
    return None


def _double(value: Any) -> float | str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        value = float(value)
        return value if math.isfinite(value) else ("NaN" if math.isnan(value) else "Infinity")
    if isinstance(value, str):
        if value in ("NaN", "Infinity", "-Infinity"):
            return value  # kept as sent in the raw row; normalization reads it as None
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _kv_pairs(items: list[Any], depth: int = 0, decoded: Decoded | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = any_value(item.get("value"), depth, decoded)
    return out


def attributes(value: Any, where: str, decoded: Decoded | None = None) -> dict[str, Any]:
    return _kv_pairs(_list(value, where), 0, decoded)


def _label(name: Any) -> str:
    """A span's name as errors quote it: short."""
    text = name if isinstance(name, str) else ""
    return repr(text if len(text) <= 60 else text[:60] + "...")


def _resource(container: dict[str, Any], where: str, out: Decoded) -> Resource:
    resource = _obj(container.get("resource"), f"{where}.resource")
    return Resource(attributes(resource.get("attributes"), f"{where}.resource.attributes", out))


def _scopes(container: dict[str, Any], new: str, old: str, where: str) -> list[tuple[Any, str]]:
    scopes = [(s, f"{where}.{new}.{i}") for i, s in enumerate(_list(container.get(new), where))]
    scopes += [(s, f"{where}.{old}.{i}") for i, s in enumerate(_list(container.get(old), where))]
    return scopes


def _scope_names(scope_container: dict[str, Any], where: str) -> tuple[str, str]:
    scope = scope_container.get("scope") or scope_container.get("instrumentationLibrary")
    scope = _obj(scope, f"{where}.scope")
    return _str(scope.get("name"), f"{where}.scope.name"), _str(
        scope.get("version"), f"{where}.scope.version"
    )


def decode_traces(body: bytes) -> Decoded:
    out = Decoded()
    document = _load(body, out)
    for i, raw in enumerate(_list(document.get("resourceSpans"), "resourceSpans")):
        where = f"resourceSpans.{i}"
        resource_spans = _obj(raw, where)
        resource = _resource(resource_spans, where, out)
        scopes = _scopes(resource_spans, "scopeSpans", "instrumentationLibrarySpans", where)
        for raw_scope, scope_where in scopes:
            scope_spans = _obj(raw_scope, scope_where)
            scope_name, scope_version = _scope_names(scope_spans, scope_where)
            for j, raw_span in enumerate(_list(scope_spans.get("spans"), scope_where)):
                span_where = f"{scope_where}.spans.{j}"
                raw_span = _obj(raw_span, span_where)
                try:
                    span = _span(raw_span, span_where, out)
                except (DecodeError, Refused) as exc:
                    # One span's values: the span is rejected, the rest of the export kept.
                    span = f"span {_label(raw_span.get('name'))}: {exc}"
                if isinstance(span, str):
                    out.reject(span)
                    continue
                span.scope_name, span.scope_version, span.resource = (
                    scope_name,
                    scope_version,
                    resource,
                )
                out.spans.append(span)
    return out


def _span(raw: dict[str, Any], where: str, out: Decoded) -> Span | str:
    """The span, or why it is rejected (a bad id); `DecodeError` or `Refused` for a value that
    cannot be stored as sent."""
    name = _str(raw.get("name"), f"{where}.name")
    trace_id = check_trace_id(_id_bytes(raw.get("traceId")))
    span_id = check_span_id(_id_bytes(raw.get("spanId")))
    if trace_id is None or span_id is None:
        return f"span {_label(name)}: invalid {'trace id' if trace_id is None else 'span id'}"
    status = _obj(raw.get("status"), f"{where}.status")
    start_ns = _time(raw.get("startTimeUnixNano"), "startTimeUnixNano")
    end_ns = _time(raw.get("endTimeUnixNano"), "endTimeUnixNano")
    check_times(start_ns, end_ns, "the span")
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=check_span_id(_id_bytes(raw.get("parentSpanId"))) or "",
        name=name,
        kind=_enum(raw.get("kind"), SPAN_KINDS, f"{where}.kind"),
        start_ns=start_ns,
        end_ns=end_ns,
        status_code=_enum(status.get("code"), STATUS_CODES, f"{where}.status.code"),
        status_message=_str(status.get("message"), f"{where}.status.message"),
        attributes=attributes(raw.get("attributes"), f"{where}.attributes", out),
        events=[
            _event(_obj(e, f"{where}.events.{k}"), f"events.{k}", out)
            for k, e in enumerate(_list(raw.get("events"), f"{where}.events"))
        ],
        links=[
            _link(_obj(link, f"{where}.links.{k}"), f"{where}.links.{k}", out)
            for k, link in enumerate(_list(raw.get("links"), f"{where}.links"))
        ],
        scope_name="",
        scope_version="",
        resource=Resource({}),
    )


def _event(raw: dict[str, Any], where: str, out: Decoded) -> dict[str, Any]:
    return {
        "name": _str(raw.get("name"), f"{where}.name"),
        "time_ns": _time(raw.get("timeUnixNano"), f"{where}.timeUnixNano"),
        "attributes": attributes(raw.get("attributes"), f"{where}.attributes", out),
    }


def _link(raw: dict[str, Any], where: str, out: Decoded) -> dict[str, Any]:
    return {
        "trace_id": _id_bytes(raw.get("traceId")).hex(),
        "span_id": _id_bytes(raw.get("spanId")).hex(),
        "attributes": attributes(raw.get("attributes"), f"{where}.attributes", out),
    }


def decode_logs(body: bytes) -> Decoded:
    out = Decoded()
    document = _load(body, out)
    for i, raw in enumerate(_list(document.get("resourceLogs"), "resourceLogs")):
        where = f"resourceLogs.{i}"
        resource_logs = _obj(raw, where)
        resource = _resource(resource_logs, where, out)
        scopes = _scopes(resource_logs, "scopeLogs", "instrumentationLibraryLogs", where)
        for raw_scope, scope_where in scopes:
            scope_logs = _obj(raw_scope, scope_where)
            scope_name, scope_version = _scope_names(scope_logs, scope_where)
            records = _list(scope_logs.get("logRecords"), scope_where)
            for j, raw_record in enumerate(records):
                record_where = f"{scope_where}.logRecords.{j}"
                record = _obj(raw_record, record_where)
                try:
                    log = _log(record, record_where, out)
                except (DecodeError, Refused) as exc:
                    out.reject(f"log record {j} of {scope_where}: {exc}")
                    continue
                log.scope_name, log.scope_version, log.resource = (
                    scope_name,
                    scope_version,
                    resource,
                )
                out.logs.append(log)
    return out


def _log(record: dict[str, Any], where: str, out: Decoded) -> LogRecord:
    attrs = attributes(record.get("attributes"), f"{where}.attributes", out)
    trace_id = check_trace_id(_id_bytes(record.get("traceId")))
    span_id = check_span_id(_id_bytes(record.get("spanId")))
    if trace_id is None or span_id is None:
        trace_id = span_id = None
    observed = _time(record.get("observedTimeUnixNano"), "observedTimeUnixNano")
    return LogRecord(
        trace_id=trace_id or "",
        span_id=span_id or "",
        event_name=event_name(_str(record.get("eventName"), f"{where}.eventName"), attrs),
        time_ns=_time(record.get("timeUnixNano"), "timeUnixNano") or observed,
        observed_ns=observed,
        severity_number=_severity(record.get("severityNumber")),
        body=any_value(record.get("body"), 0, out),
        attributes=attrs,
        scope_name="",
        scope_version="",
        resource=Resource({}),
    )
