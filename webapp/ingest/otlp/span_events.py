"""GenAI content sent as span events, read exactly as log records are read
(docs/otlp-mapping.md, 'Span events read as log records').

Strands Agents puts its content in span events, not in attributes or log records: by default
the per-message events (`gen_ai.system.message`, `gen_ai.user.message`,
`gen_ai.assistant.message`, `gen_ai.tool.message`, `gen_ai.choice`) with their fields as event
attributes; with `gen_ai_latest_experimental`, `gen_ai.client.inference.operation.details`
events, each carrying one or more of `gen_ai.input.messages`, `gen_ai.output.messages` and
`gen_ai.system_instructions`. Each such event becomes the log record it stands for (its
attributes are the body and the attributes) and goes through `genai_logs.normalize_log`; the
span's messages are then assembled from them as from its log records: operation details
first, else the per-message events for the input and `gen_ai.choice` for the output.
"""

from __future__ import annotations

from typing import Any

from .genai_logs import CHOICE_EVENT, MESSAGE_EVENTS, OPERATION_DETAILS, normalize_log
from .records import LogRecord, Span

# The fields of those events that hold content: in the record, not in the raw row.
CONTENT_FIELDS = frozenset(
    {
        "content",
        "message",
        "tool.result",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
    }
)


# The events read as log records.
NAMES = frozenset({OPERATION_DETAILS, CHOICE_EVENT, *MESSAGE_EVENTS})


def read_from(record: dict[str, Any], event_name: str) -> bool:
    """Whether an event of this name on the record's span is read into the record."""
    return record.get("class") in ("llm", "agent") and event_name in NAMES


def event_records(span: Span, limit: int) -> list[dict[str, Any]]:
    """The span's GenAI content events as normalized log records, in event order."""
    out = []
    for ordinal, event in enumerate(span.events):
        if event["name"] not in NAMES:
            continue
        attributes = event["attributes"]
        record = LogRecord(
            trace_id=span.trace_id,
            span_id=span.span_id,
            event_name=event["name"],
            time_ns=event["time_ns"],
            observed_ns=event["time_ns"],
            severity_number=0,
            body=dict(attributes),
            attributes=attributes,
            scope_name=span.scope_name,
            scope_version=span.scope_version,
            resource=span.resource,
        )
        out.append(normalize_log(record, ordinal, limit))
    return out


def read(record: dict[str, Any], span: Span, limit: int) -> None:
    """Fill the record's `input`, `output` and `system` from its span events when its
    attributes gave none."""
    if all(record.get(k) is not None for k in ("input", "output", "system")):
        return
    events = event_records(span, limit)
    if not events:
        return
    details = [e for e in events if e["event"] == OPERATION_DETAILS]
    if record.get("input") is None:
        found = next((d["input"] for d in details if d.get("input") is not None), None)
        if found is None:
            found = [e["message"] for e in events if "message" in e and "choice_index" not in e]
        if found:
            record["input"] = found
    if record.get("output") is None:
        found = next((d["output"] for d in details if d.get("output") is not None), None)
        if found is None:
            choices = sorted(
                (e for e in events if "choice_index" in e), key=lambda e: e["choice_index"]
            )
            found = [e["message"] for e in choices]
        if found:
            record["output"] = found
    if record.get("system") is None:
        system = next((d["system"] for d in details if d.get("system")), None)
        if system is not None:
            record["system"] = system
