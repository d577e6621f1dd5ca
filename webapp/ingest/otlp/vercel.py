"""The Vercel AI SDK's spans (`experimental_telemetry`, scope `ai`) read into the normalized
record (docs/otlp-mapping.md, 'The Vercel AI SDK').

The SDK sends no `gen_ai.operation.name`: `ai.operationId` says what a span is. A call of
`generateText` / `streamText` (`generateObject`, `streamObject`) is an agent run; each of its
steps, `<operation>.doGenerate` / `.doStream`, one model call; `ai.toolCall` one tool execution.
A model call's request is `ai.prompt.messages` (the SDK's ModelMessage form), its answer
`ai.response.text` and `ai.response.toolCalls`; a run's request is `ai.prompt`
(`{system, prompt | messages}`). Users put a session id in `ai.telemetry.metadata.<key>`: the
keys of SESSION_KEYS are conversation ids (normalize.CONVERSATION_KEYS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import messages as m
from .records import Span

RUN_OPERATIONS = frozenset(
    {"ai.generateText", "ai.streamText", "ai.generateObject", "ai.streamObject"}
)
CALL_SUFFIXES = (".doGenerate", ".doStream")
TOOL_OPERATION = "ai.toolCall"
# Where users put a session id (`experimental_telemetry: {metadata: {sessionId: ...}}`).
SESSION_KEYS = (
    "ai.telemetry.metadata.sessionId",
    "ai.telemetry.metadata.conversationId",
    "ai.telemetry.metadata.threadId",
)
# Content: read into the record, never stored verbatim in the raw row.
CONTENT_KEYS = frozenset(
    {
        "ai.prompt",
        "ai.prompt.messages",
        "ai.response.text",
        "ai.response.toolCalls",
        "ai.response.object",
        "ai.response.reasoning",
        "ai.toolCall.args",
        "ai.toolCall.result",
    }
)


def _operation(attrs: Mapping[str, Any]) -> str | None:
    value = attrs.get("ai.operationId")
    return value if isinstance(value, str) and value.startswith("ai.") else None


def classify(attrs: Mapping[str, Any]) -> str | None:
    """agent, llm or tool for the SDK's spans; None for any other span."""
    operation = _operation(attrs)
    if operation is None:
        return None
    if operation == TOOL_OPERATION:
        return "tool"
    if operation.endswith(CALL_SUFFIXES):
        return "llm"
    if operation in RUN_OPERATIONS:
        return "agent"
    return None


def _load(value: Any, limit: int) -> Any:
    return m.load_json(value, limit) if isinstance(value, str) else value


def _output_text(output: Any) -> Any:
    """A tool-result part's `output` (`{type: text|json|error-text|error-json|content, value}`),
    or AI SDK 4's `result`, as the text the model saw."""
    if not isinstance(output, Mapping) or "type" not in output:
        return output
    value = output.get("value")
    if output["type"] == "content" and isinstance(value, list):
        texts = [
            item["text"]
            for item in value
            if isinstance(item, Mapping) and isinstance(item.get("text"), str)
        ]
        return "\n\n".join(texts)
    if output["type"] == "execution-denied":
        return output.get("reason") or "execution denied"
    return value


def _parts(content: Any, limit: int) -> list[m.Part]:
    if isinstance(content, str):
        return [m.text_part(content)]
    parts: list[m.Part] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(m.text_part(part["text"]))
        elif kind == "tool-call":
            arguments = part["input"] if "input" in part else part.get("args")
            parts.append(
                m.tool_call_part(part.get("toolCallId"), part.get("toolName"), arguments, limit)
            )
        elif kind == "tool-result":
            output = part["output"] if "output" in part else part.get("result")
            result = m.response_part(part.get("toolCallId"), _output_text(output))
            if isinstance(part.get("toolName"), str):
                result["name"] = part["toolName"]
            parts.append(result)
        else:
            parts.append({"type": "other", "kind": str(kind)})
    return parts


def model_messages(value: Any, limit: int) -> list[m.Message] | None:
    """The SDK's ModelMessage list (`ai.prompt.messages`, `ai.prompt`'s `messages`)."""
    value = _load(value, limit)
    if not isinstance(value, list):
        return None
    return [
        m.message(item.get("role"), _parts(item.get("content"), limit))
        for item in value
        if isinstance(item, Mapping)
    ]


def _response(attrs: Mapping[str, Any], limit: int) -> list[m.Message] | None:
    text = attrs.get("ai.response.text")
    calls = _load(attrs.get("ai.response.toolCalls"), limit)
    if not isinstance(text, str) and not isinstance(calls, list):
        return None  # outputs not recorded (`recordOutputs: false`)
    parts = [m.text_part(text)] if isinstance(text, str) and text else []
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, Mapping):
            arguments = call["input"] if "input" in call else call.get("args")
            parts.append(
                m.tool_call_part(call.get("toolCallId"), call.get("toolName"), arguments, limit)
            )
    return [m.message("assistant", parts, attrs.get("ai.response.finishReason"))]


def _tools(value: Any, limit: int) -> list[dict[str, Any]] | None:
    """`ai.prompt.tools`: a list of JSON strings `{type, name, description, inputSchema}`."""
    found = []
    for item in value if isinstance(value, list) else ():
        tool = _load(item, limit)
        if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
            continue
        if not tool["name"] or len(tool["name"]) > 255:
            continue
        description = tool.get("description")
        schema = tool.get("inputSchema", tool.get("parameters"))
        found.append(
            {
                "name": tool["name"],
                "description": description if isinstance(description, str) else None,
                "parameters": schema if isinstance(schema, dict) else None,
            }
        )
    return found or None


def _count(attrs: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31:
            return value
    return None


def _set(record: dict[str, Any], key: str, value: Any) -> None:
    if record.get(key) is None and value is not None:
        record[key] = value


def complete(record: dict[str, Any], span: Span, limit: int) -> None:
    """Fill what the record lacks from the SDK's `ai.*` attributes (no-op for other spans)."""
    attrs = span.attributes
    if _operation(attrs) is None:
        return
    provider = attrs.get("ai.model.provider")
    if isinstance(provider, str) and provider:
        # `openai.chat`, `anthropic.messages`: the provider is the part before the dot.
        record["provider"] = provider.split(".")[0]
    _set(record, "model", attrs.get("ai.response.model") or attrs.get("ai.model.id") or None)
    kind = record["class"]
    if kind == "llm":
        _set(record, "input", model_messages(attrs.get("ai.prompt.messages"), limit))
        _set(record, "output", _response(attrs, limit))
        _set(record, "tools", _tools(attrs.get("ai.prompt.tools"), limit))
        reason = attrs.get("ai.response.finishReason")
        _set(record, "finish_reasons", [reason] if isinstance(reason, str) and reason else None)
        _set(record, "input_tokens", _count(attrs, "ai.usage.inputTokens", "ai.usage.promptTokens"))
        _set(
            record,
            "output_tokens",
            _count(attrs, "ai.usage.outputTokens", "ai.usage.completionTokens"),
        )
        _set(
            record,
            "cached_tokens",
            _count(
                attrs, "ai.usage.inputTokenDetails.cacheReadTokens", "ai.usage.cachedInputTokens"
            ),
        )
    elif kind == "agent":
        prompt = _load(attrs.get("ai.prompt"), limit)
        if isinstance(prompt, Mapping):
            messages = model_messages(prompt.get("messages"), limit)
            if messages is None and isinstance(prompt.get("prompt"), str):
                messages = [m.message("user", [m.text_part(prompt["prompt"])])]
            _set(record, "input", messages)
            system = prompt.get("system")
            _set(record, "system", system if isinstance(system, str) and system else None)
        function = attrs.get("ai.telemetry.functionId")
        _set(record, "agent_name", function if isinstance(function, str) and function else None)
    elif kind == "tool" and isinstance(record.get("tool"), dict):
        tool = record["tool"]
        call_id = attrs.get("ai.toolCall.id")
        if isinstance(call_id, str) and call_id:
            tool["id"] = call_id
        name = attrs.get("ai.toolCall.name")
        if isinstance(name, str) and name:
            tool["name"] = name
        if tool.get("arguments") is None:
            tool["arguments"] = m.arguments_of(attrs.get("ai.toolCall.args"), limit)
        result = attrs.get("ai.toolCall.result")
        if tool.get("result") is None and isinstance(result, str):
            parsed = m.load_json(result, limit)
            # The SDK JSON-encodes what the tool returned: a string comes back quoted.
            tool["result"] = parsed if isinstance(parsed, str) else result
