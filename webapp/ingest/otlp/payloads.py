"""Ids, arguments and results that agent frameworks bury in their tool spans' payloads
(docs/otlp-mapping.md, 'Payloads of framework tool spans'), and results wrapped in content
blocks (docs/otlp-mapping.md, 'Content blocks').

- LangChain's callback payload as the arguments (OpenLLMetry's `gen_ai.tool.call.arguments` /
  `traceloop.entity.input`): `{"input_str", "inputs": {...}, "kwargs": {"tool_call_id"}, ...}`
  → the arguments are `inputs`, the call id `kwargs.tool_call_id`;
- a serialized LangChain ToolMessage as the result, alone or under `output` (OpenLLMetry:
  `{"output": {"lc": 1, "kwargs": {"content", "tool_call_id"}}}`, OpenInference:
  `{"type": "tool", "data": {"content", "tool_call_id"}}`) → the result is its content, the
  call id its `tool_call_id`;
- a result that is a list of text blocks (`[{"type": "text", "text"}]`, `[{"text"}]`), or the
  JSON text of one → the blocks' texts joined by a blank line.

Pure functions of values; no knowledge of who sent them beyond these shapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# The keys of LangChain's tool-start callback payload besides `inputs`.
_CALLBACK_KEYS = frozenset({"input_str", "inputs", "kwargs", "metadata", "tags", "name"})


def _parsed(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) <= limit and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def callback_arguments(value: Any, limit: int) -> tuple[Any, str | None]:
    """(arguments, call id) of a tool span's arguments: LangChain's callback payload gives its
    `inputs` and `kwargs.tool_call_id`; anything else is returned as it is, without an id."""
    parsed = _parsed(value, limit)
    if (
        isinstance(parsed, Mapping)
        and isinstance(parsed.get("inputs"), Mapping)
        and "input_str" in parsed
        and set(parsed) <= _CALLBACK_KEYS
    ):
        kwargs = parsed.get("kwargs")
        call_id = kwargs.get("tool_call_id") if isinstance(kwargs, Mapping) else None
        return dict(parsed["inputs"]), call_id if isinstance(call_id, str) and call_id else None
    return value, None


def _tool_message(value: Any) -> Mapping[str, Any] | None:
    """The fields of a serialized LangChain ToolMessage (`dumpd` or `message_to_dict` form)."""
    if not isinstance(value, Mapping):
        return None
    if value.get("lc") == 1 and isinstance(value.get("kwargs"), Mapping):
        ids = value.get("id")
        fields = value["kwargs"]
        if (isinstance(ids, list) and ids and ids[-1] == "ToolMessage") or fields.get(
            "type"
        ) == "tool":
            return fields
        return None
    if value.get("type") == "tool" and isinstance(value.get("data"), Mapping):
        return value["data"]
    return None


def tool_result(value: Any, limit: int) -> tuple[Any, str | None]:
    """(result, call id) of a tool span's result: a serialized tool message (alone or under
    `output`) gives its content and `tool_call_id`; text blocks are joined; anything else is
    returned as it is, without an id."""
    parsed = _parsed(value, limit)
    candidate = parsed
    if isinstance(parsed, Mapping) and "output" in parsed and set(parsed) <= {"output", "kwargs"}:
        candidate = _parsed(parsed["output"], limit)
    fields = _tool_message(candidate)
    if fields is not None:
        call_id = fields.get("tool_call_id")
        content = fields.get("content")
        return joined_text(content) if content is not None else None, (
            call_id if isinstance(call_id, str) and call_id else None
        )
    joined = joined_text(parsed)
    return (joined if isinstance(joined, str) and joined is not parsed else value), None


def joined_text(value: Any) -> Any:
    """A list of text blocks as their texts joined by a blank line; anything else unchanged."""
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(b, Mapping)
            and isinstance(b.get("text"), str)
            and b.get("type", "text") == "text"
            and set(b) <= {"type", "text", "annotations", "citations", "cache_control"}
            for b in value
        )
    ):
        return "\n\n".join(b["text"] for b in value)
    return value
