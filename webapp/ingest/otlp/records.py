"""What the OTLP readers give: spans and log records as plain values, the same for protobuf and
OTLP/JSON (docs/otlp-mapping.md, 'Decoding').

Ids are lowercase hex (`trace_id` 32 characters, `span_id` 16, `""` when absent), times are
unix nanoseconds, attribute values are Python values (str, bool, int, float, list, dict, None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Span kinds and status codes as OTLP numbers them.
SPAN_KINDS = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
STATUS_CODES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
STATUS_ERROR = 2

# AnyValue nesting deeper than this becomes a marker string.
MAX_DEPTH = 32
TOO_DEEP = "[nested too deep]"

# The largest time stored: the databases' columns are signed 64-bit (the year 2262). OTLP's
# fixed64 goes twice as far; a time past this one is refused with its span or log record.
MAX_TIME_NS = 2**63 - 1


class DecodeError(ValueError):
    """The body cannot be read as an OTLP export request (a 400)."""


@dataclass(slots=True)
class Resource:
    """A resource as sent: its attributes; `service_name` is `service.name` or ""."""

    attributes: dict[str, Any]

    @property
    def service_name(self) -> str:
        value = self.attributes.get("service.name")
        return value if isinstance(value, str) else ""


@dataclass(slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    events: list[dict[str, Any]]  # {"name", "time_ns", "attributes"}
    links: list[dict[str, Any]]  # {"trace_id", "span_id", "attributes"}
    scope_name: str
    scope_version: str
    resource: Resource


@dataclass(slots=True)
class LogRecord:
    trace_id: str  # "" when absent or invalid: the record is unattached
    span_id: str
    event_name: str
    time_ns: int  # timeUnixNano, else observedTimeUnixNano (0 if neither)
    observed_ns: int
    severity_number: int
    body: Any
    attributes: dict[str, Any]
    scope_name: str
    scope_version: str
    resource: Resource


class Refused(ValueError):
    """One span or log record cannot be stored as sent: it is rejected, the rest is kept
    (the answer's `partialSuccess`)."""


@dataclass
class Decoded:
    """One export request, read: its items, how many were rejected and why, and what was
    repaired (each kind counted once: the answer's warnings)."""

    spans: list[Span] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    repairs: dict[str, int] = field(default_factory=dict)

    def reject(self, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:  # the answer names the first few, not thousands
            self.errors.append(message)

    def repaired(self, what: str, count: int = 1) -> None:
        self.repairs[what] = self.repairs.get(what, 0) + count

    @property
    def warnings(self) -> list[str]:
        return [f"{count} {what}" for what, count in self.repairs.items()]


def check_times(start_ns: int, end_ns: int, what: str) -> None:
    """A span's times: integers from 0 to MAX_TIME_NS, the end not before the start (an
    unset end, 0, is allowed). `Refused` otherwise."""
    for name, value in (("start", start_ns), ("end", end_ns)):
        check_time(value, f"{what}: {name} time")
    if end_ns and end_ns < start_ns:
        raise Refused(f"{what}: its end time is before its start time")


def check_time(value: int, what: str) -> int:
    if not 0 <= value <= MAX_TIME_NS:
        raise Refused(f"{what} {value} is out of range (0 to 2^63 - 1 nanoseconds)")
    return value


def check_trace_id(value: bytes) -> str | None:
    """The hex trace id, or None when it is not 16 bytes or all zeros."""
    if len(value) != 16 or not any(value):
        return None
    return value.hex()


def check_span_id(value: bytes) -> str | None:
    """The hex span id, or None when it is not 8 bytes or all zeros."""
    if len(value) != 8 or not any(value):
        return None
    return value.hex()


def event_name(record_name: str, attributes: dict[str, Any]) -> str:
    """A log record's event name: the field, else attribute `event.name` (Node)."""
    if record_name:
        return record_name
    value = attributes.get("event.name")
    return value if isinstance(value, str) else ""


# A \\uD800-\\uDFFF escape in JSON text (bytes or str): only then can what json.loads makes of it
# hold a lone surrogate.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
SURROGATE_ESCAPE_TEXT = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(document: Any) -> int:
    """Replace lone UTF-16 surrogates (which neither UTF-8 nor PostgreSQL can hold) by U+FFFD in
    every string and key of a parsed JSON document's lists and objects, in place; json.loads
    has already joined valid pairs. No recursion: the document may be as deep as json.loads
    allows. Returns how many were replaced."""
    count = 0

    def fix(text: str) -> str:
        nonlocal count
        fixed, n = _LONE_SURROGATE.subn("\ufffd", text)
        count += n
        return fixed

    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in list(node):
                value = node[key]
                if isinstance(key, str) and _LONE_SURROGATE.search(key):
                    del node[key]
                    key = fix(key)
                    node[key] = value
                if isinstance(value, str):
                    node[key] = fix(value)
                elif isinstance(value, dict | list):
                    stack.append(value)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                if isinstance(value, str):
                    node[i] = fix(value)
                elif isinstance(value, dict | list):
                    stack.append(value)
    return count


def without_surrogates(value: Any) -> Any:
    """`value` (parsed JSON) with lone surrogates replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    replace_surrogates(value)
    return value
