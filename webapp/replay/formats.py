"""Rule 9: render kept units as a provider payload.

openai-chat::

    {"messages": [{"role": "system", ...}, {"role": "user", "content": ...},
                  {"role": "assistant", "content": null, "tool_calls": [{"id", "type":
                   "function", "function": {"name", "arguments": "<JSON>"}}]},
                  {"role": "tool", "tool_call_id", "content"}, ...],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}]}

openai-responses::

    {"instructions": ..., "input": [{"role": "user", "content": ...},
     {"type": "function_call", "call_id", "name", "arguments": "<JSON>"},
     {"type": "function_call_output", "call_id", "output"}, {"role": "assistant", ...}],
     "tools": [{"type": "function", "name", "description", "parameters", "strict": false}]}

  Function tools in the Responses API default to strict schemas; ``"strict": false`` keeps a
  stored schema that is not strict-compatible acceptable, and ``parameters`` is always present
  (an empty object schema when none is stored), as the SDK's ``FunctionToolParam`` requires.

anthropic::

    {"system": ..., "messages": [{"role": "user", "content": ...},
     {"role": "assistant", "content": [{"type": "tool_use", "id", "name", "input": {...}}]},
     {"role": "user", "content": [{"type": "tool_result", "tool_use_id", "content",
                                   "is_error": true?}, ...]}],
     "tools": [{"name", "description", "input_schema"}]}

  All results of a round go, in call order, into the next user message; consecutive messages
  with the same role are merged into one (text becomes a text block), so roles alternate and
  tool results always come first in their user message. System messages found inside the
  history are appended to the top-level ``system`` text. An empty result is sent as a
  ``tool_result`` without ``content`` (the field is optional; empty text blocks are rejected).

Tool schemas: providers reject a top-level schema that is not ``"type": "object"``, which is
what an agent that stores ``{}`` (or properties without a type) means, so such schemas are sent
with ``"type": "object"`` added; a schema that declares another type is sent as stored (the
validator reports it).

Keys with nothing to put in them (``tools``, ``system``, ``instructions``, descriptions) are
omitted. Arguments ``None`` become ``"{}"`` / ``{}``. Errors: ``is_error: true`` for Anthropic;
OpenAI formats send the error text as the result content. Sub-objects (arguments, schemas) are
shared with the history, not copied: treat the payload as read-only or deep-copy it.
"""

from __future__ import annotations

from typing import Any

from .history import ToolDefinition
from .units import CallOut, DiagnosticLog, Unit

EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

JSON = dict[str, Any]


def object_schema(parameters: dict[str, Any] | None) -> JSON:
    """The stored schema as providers accept it: untyped schemas become object schemas."""
    if not parameters:
        return EMPTY_SCHEMA
    if "type" not in parameters:
        return {"type": "object", **parameters}
    return parameters


def _tools_openai_chat(tools: list[ToolDefinition]) -> list[JSON]:
    out = []
    for t in tools:
        fn: JSON = {"name": t.name}
        if t.description:
            fn["description"] = t.description
        if t.parameters is not None:
            fn["parameters"] = object_schema(t.parameters)
        out.append({"type": "function", "function": fn})
    return out


def _tools_openai_responses(tools: list[ToolDefinition]) -> list[JSON]:
    out = []
    for t in tools:
        tool: JSON = {"type": "function", "name": t.name}
        if t.description:
            tool["description"] = t.description
        tool["parameters"] = object_schema(t.parameters)
        tool["strict"] = False
        out.append(tool)
    return out


def _tools_anthropic(tools: list[ToolDefinition]) -> list[JSON]:
    out = []
    for t in tools:
        tool: JSON = {"name": t.name}
        if t.description:
            tool["description"] = t.description
        tool["input_schema"] = object_schema(t.parameters)
        out.append(tool)
    return out


def _openai_chat(units: list[Unit], system: str | None, tools: list[ToolDefinition]) -> JSON:
    messages: list[JSON] = []
    append = messages.append
    if system:
        append({"role": "system", "content": system})
    for u in units:
        kind = u.kind
        if kind == "round":
            append(
                {
                    "role": "assistant",
                    "content": u.text or None,
                    "tool_calls": [
                        {
                            "id": c.call_id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments_json},
                        }
                        for c in u.calls
                    ],
                }
            )
            for c in u.calls:
                result = c.result
                if result is not None:
                    append({"role": "tool", "tool_call_id": c.call_id, "content": result})
        else:  # text / user / system
            append({"role": "assistant" if kind == "text" else kind, "content": u.text})
    payload: JSON = {"messages": messages}
    if tools:
        payload["tools"] = _tools_openai_chat(tools)
    return payload


def _openai_responses(units: list[Unit], system: str | None, tools: list[ToolDefinition]) -> JSON:
    items: list[JSON] = []
    append = items.append
    for u in units:
        kind = u.kind
        if kind == "round":
            if u.text:
                append({"role": "assistant", "content": u.text})
            for c in u.calls:
                append(
                    {
                        "type": "function_call",
                        "call_id": c.call_id,
                        "name": c.name,
                        "arguments": c.arguments_json,
                    }
                )
            for c in u.calls:
                result = c.result
                if result is not None:
                    append({"type": "function_call_output", "call_id": c.call_id, "output": result})
        else:
            append({"role": "assistant" if kind == "text" else kind, "content": u.text})
    payload: JSON = {}
    if system:
        payload["instructions"] = system
    payload["input"] = items
    if tools:
        payload["tools"] = _tools_openai_responses(tools)
    return payload


def _tool_result(c: CallOut) -> JSON:
    block: JSON = {"type": "tool_result", "tool_use_id": c.call_id}
    if c.result:
        block["content"] = c.result
    if c.is_error:
        block["is_error"] = True
    return block


def _blocks(content: str | list[JSON]) -> list[JSON]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _anthropic(
    units: list[Unit],
    system: str | None,
    tools: list[ToolDefinition],
    log: DiagnosticLog | None,
    merge: bool,
) -> JSON:
    messages: list[JSON] = []
    system_parts = [system] if system else []

    def push(role: str, content: str | list[JSON], u: Unit) -> None:
        if merge and messages and messages[-1]["role"] == role:
            prev = messages[-1]
            prev_content = prev["content"]
            if isinstance(prev_content, str):
                prev["content"] = prev_content = _blocks(prev_content)
            prev_content.extend(_blocks(content))
            if log is not None:
                log.add(
                    u.pos,
                    "message_merged",
                    f"Anthropic requires alternating roles; this {role} content is merged into "
                    f"the preceding {role} message.",
                    message_id=u.message_id,
                    round_index=u.round_index,
                )
            return
        messages.append({"role": role, "content": content})

    for u in units:
        kind = u.kind
        if kind == "round":
            push(
                "assistant",
                [
                    *([{"type": "text", "text": u.text}] if u.text else []),
                    *(
                        {
                            "type": "tool_use",
                            "id": c.call_id,
                            "name": c.name,
                            "input": c.arguments if c.arguments is not None else {},
                        }
                        for c in u.calls
                    ),
                ],
                u,
            )
            results = [_tool_result(c) for c in u.calls if c.result is not None]
            if results:
                push("user", results, u)
        elif kind == "text":
            push("assistant", u.text, u)
        elif kind == "user":
            push("user", u.text, u)
        else:
            system_parts.append(u.text)
            if log is not None:
                log.add(
                    u.pos,
                    "system_moved",
                    "Anthropic has no system role inside messages; this system message is "
                    "appended to the top-level system prompt.",
                    message_id=u.message_id,
                )
    payload: JSON = {}
    if system_parts:
        payload["system"] = "\n\n".join(system_parts)
    payload["messages"] = messages
    if tools:
        payload["tools"] = _tools_anthropic(tools)
    return payload


def render(
    units: list[Unit],
    system: str | None,
    tools: list[ToolDefinition],
    fmt: str,
    log: DiagnosticLog | None = None,
    *,
    merge: bool = True,
) -> JSON:
    """Render ``units`` in format ``fmt``. ``merge=False`` (naive replay) skips role merging."""
    if fmt == "openai-chat":
        return _openai_chat(units, system, tools)
    if fmt == "openai-responses":
        return _openai_responses(units, system, tools)
    if fmt == "anthropic":
        return _anthropic(units, system, tools, log, merge)
    raise ValueError(f"unknown format {fmt!r}")


_TOOL_RENDERERS = {
    "openai-chat": _tools_openai_chat,
    "openai-responses": _tools_openai_responses,
    "anthropic": _tools_anthropic,
}


def render_tools(tools: list[ToolDefinition], fmt: str) -> list[JSON]:
    """The ``tools`` entry of a payload in format ``fmt`` (as ``render`` makes it)."""
    return _TOOL_RENDERERS[fmt](tools)


def payload_messages(payload: JSON, fmt: str) -> list[JSON]:
    """The message list of a payload: ``input`` for openai-responses, else ``messages``."""
    key = "input" if fmt == "openai-responses" else "messages"
    value = payload.get(key)
    return value if isinstance(value, list) else []
