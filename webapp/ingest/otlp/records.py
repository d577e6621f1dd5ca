"""What the OTLP readers give: spans and log records as plain values, the same for protobuf and
OTLP/JSON (docs/otlp-mapping.md, 'Decoding').

Ids are lowercase hex (`trace_id` 32 characters, `span_id` 16, `""` when absent), times are
unix nanoseconds, attribute values are Python values (str, bool, int, float, list, dict, None).
"""

from __future__ import annotations

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


@dataclass
class Decoded:
    """One export request, read: its items, and how many were rejected and why."""

    spans: list[Span] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def reject(self, message: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:  # the answer names the first few, not thousands
            self.errors.append(message)


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
