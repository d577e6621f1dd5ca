"""One normalized record per GenAI log record: what the projection reads of log records, and
of the span events read as log records (`span_events`); below `normalize` and `span_events`,
which both use it. Where messages come from: docs/otlp-mapping.md, 'Where messages are read'.

Record of a log record: event, trace_id, span_id, time_ns, ordinal, and one of
`input`/`output`/`system` (operation details), `message` (per-message events) or
`choice_index` + `message` (gen_ai.choice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import messages as m
from .records import LogRecord

OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"


def is_genai_log(record: LogRecord) -> bool:
    return record.event_name.startswith("gen_ai.")


def normalize_log(
    record: LogRecord, ordinal: int, limit: int = m.DEFAULT_PARSE_LIMIT
) -> dict[str, Any]:
    """The normalized record of one GenAI log record; `ordinal` orders records of one span that
    share a timestamp (Node stamps in milliseconds)."""
    out: dict[str, Any] = {
        "event": record.event_name,
        "trace_id": record.trace_id,
        "span_id": record.span_id,
        "time_ns": record.time_ns,
        "ordinal": ordinal,
    }
    name = record.event_name
    body = record.body
    if isinstance(body, str):
        parsed = m.load_json(body, limit)
        body = parsed if isinstance(parsed, Mapping) else {"content": body}
    if not isinstance(body, Mapping):
        body = {}
    if name == OPERATION_DETAILS:
        attrs = record.attributes
        found = {
            "input": m.semconv_messages(attrs.get("gen_ai.input.messages"), limit),
            "output": m.semconv_messages(attrs.get("gen_ai.output.messages"), limit),
            "system": m.system_instructions(attrs.get("gen_ai.system_instructions"), limit),
        }
        out.update((key, value) for key, value in found.items() if value is not None)
    elif name in MESSAGE_EVENTS:
        out["message"] = m.chat_message(MESSAGE_EVENTS[name], body, limit)
    elif name == CHOICE_EVENT:
        index = body.get("index")
        out["choice_index"] = index if isinstance(index, int) and not isinstance(index, bool) else 0
        inner = body.get("message")
        if isinstance(inner, str):  # Strands: the message's content, as text or JSON blocks
            inner = {"content": inner}
        message = m.chat_message("assistant", inner if isinstance(inner, Mapping) else {}, limit)
        if isinstance(body.get("finish_reason"), str):
            message["finish_reason"] = body["finish_reason"]
        out["message"] = message
    return out
