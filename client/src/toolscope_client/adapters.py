"""Provider objects as Toolscope records: OpenAI chat-completion tool rounds and usage, and
tool definitions in OpenAI's or Anthropic's shape."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from .batching import JSON
from .encoding import encode


def tool_definition(tool: Mapping[str, Any]) -> JSON:
    """Our `{name, description, parameters}` from itself or from an OpenAI/Anthropic tool."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        tool = tool["function"]
    definition = {"name": tool["name"]}
    if tool.get("description") is not None:
        definition["description"] = tool["description"]
    parameters = tool.get("parameters", tool.get("input_schema"))
    if parameters is not None:
        definition["parameters"] = parameters
    return definition


def _as_dict(obj: Any) -> JSON:
    """An OpenAI SDK object (pydantic) or a plain dict, as a dict."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_unset=False)
    return dict(vars(obj))


def _parse_arguments(raw: Any) -> JSON | None:
    """OpenAI sends arguments as a JSON string; models sometimes produce invalid JSON, which is
    kept verbatim under `_raw` rather than lost."""
    if raw is None or isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw.strip():
        return None if raw in (None, "") else {"_raw": raw}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": parsed}


def _result_content(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, Mapping) and "content" in result:
        content = result["content"]
        return content if isinstance(content, str) else encode(content).decode()
    return encode(result).decode()


def calls_from_openai(
    assistant_message: Any,
    results: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    started_at: Mapping[str, datetime | str] | None = None,
    ended_at: Mapping[str, datetime | str] | None = None,
    errors: Iterable[str] = (),
) -> list[JSON]:
    """Our ToolCalls (without round_index) from one OpenAI chat-completions tool round.

    `assistant_message` is `completion.choices[0].message` (SDK object or dict) with
    `tool_calls`. `results` are the tool messages you appended (`{"role": "tool",
    "tool_call_id", "content"}`) or a `{tool_call_id: content}` mapping; calls without a result
    are recorded without a response. `started_at` / `ended_at` / `errors` are keyed by
    tool_call_id too.
    """
    message = _as_dict(assistant_message)
    by_id: dict[str, str] = {}
    if isinstance(results, Mapping):
        by_id = {str(k): _result_content(v) for k, v in results.items()}
    elif results is not None:
        for item in results:
            entry = _as_dict(item)
            by_id[str(entry.get("tool_call_id", ""))] = _result_content(entry.get("content"))
    failed = set(errors)
    calls: list[JSON] = []
    for position, raw_call in enumerate(message.get("tool_calls") or ()):
        tool_call = _as_dict(raw_call)
        function = _as_dict(tool_call.get("function"))
        call_id = tool_call.get("id") or ""
        call: JSON = {
            "id": call_id,
            "name": function.get("name", ""),
            "arguments": _parse_arguments(function.get("arguments")),
            "sequence_index": position,
        }
        if started_at and call_id in started_at:
            call["started_at"] = started_at[call_id]
        if ended_at and call_id in ended_at:
            call["ended_at"] = ended_at[call_id]
        if call_id in by_id:
            call["response"] = {"content": by_id[call_id], "is_error": call_id in failed}
        calls.append(call)
    return calls


def usage_from_openai(completion: Any) -> JSON | None:
    """Our round usage from a chat completion (`completion.usage`, `completion.model`)."""
    data = _as_dict(completion)
    usage = _as_dict(data.get("usage"))
    if not usage:
        return None
    details = _as_dict(usage.get("prompt_tokens_details"))
    result: JSON = {
        "model": data.get("model"),
        "provider": "openai",
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": usage.get("completion_tokens"),
        "cached_tokens": details.get("cached_tokens"),
    }
    return {key: value for key, value in result.items() if value is not None}
