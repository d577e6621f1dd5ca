"""Content sent as a list of events in one span attribute, read exactly as log records are
read (docs/otlp-mapping.md, 'Events in an attribute').

Logfire's OpenAI Agents integration puts a model call's messages in the attribute `events`: a
JSON list in the legacy event shape (`{"event.name": "gen_ai.user.message", "content", ...}`,
`gen_ai.assistant.message` with `tool_calls`, `gen_ai.tool.message` with `id`), the request's
messages followed by the response's output items, one `gen_ai.assistant.message` each. So the
trailing assistant events (after the last event of another role) are the output, merged into one
message, and consecutive assistant events before them are merged as well (the Responses API
sends each function call as its own item). Its Chat Completions spans carry `input` and `output`
attributes instead: lists of OpenAI chat messages. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import messages as m

_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def _merged(messages: list[m.Message]) -> list[m.Message]:
    out: list[m.Message] = []
    for message in messages:
        if out and message["role"] == "assistant" and out[-1]["role"] == "assistant":
            out[-1] = {**out[-1], "parts": [*out[-1]["parts"], *message["parts"]]}
        else:
            out.append(message)
    return out


def event_messages(value: Any, limit: int) -> tuple[list[m.Message], list[m.Message]] | None:
    """(input, output) of an `events` attribute, or None when it is not a list of GenAI
    message events."""
    if isinstance(value, str):
        value = m.load_json(value, limit)
    if not isinstance(value, list) or not value:
        return None
    found: list[m.Message] = []
    for event in value:
        if not isinstance(event, Mapping) or event.get("event.name") not in _ROLES:
            return None
        found.append(m.chat_message(_ROLES[event["event.name"]], event, limit))
    split = len(found)
    while split > 0 and found[split - 1]["role"] == "assistant":
        split -= 1
    return _merged(found[:split]), _merged(found[split:])


def read(record: dict[str, Any], attributes: Mapping[str, Any], limit: int) -> None:
    """Fill a model call's `input` and `output` from `events`, else from the `input` /
    `output` chat-message lists, when its other sources gave none."""
    if record.get("input") is not None and record.get("output") is not None:
        return
    pair = event_messages(attributes.get("events"), limit)
    if pair is None:
        inputs = m.chat_messages(attributes.get("input"), limit)
        if not inputs:
            return
        pair = inputs, m.chat_messages(attributes.get("output"), limit) or []
    inputs, outputs = pair
    if record.get("input") is None and inputs:
        record["input"] = inputs
    if record.get("output") is None and outputs:
        record["output"] = outputs
