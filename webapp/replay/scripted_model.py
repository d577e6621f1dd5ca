"""The scripted demo model: an offline stand-in for a model provider, speaking the OpenAI Chat
Completions wire format, whose next action depends on what it receives (docs/runs.md, 'Pages
and forks'). The app serves it only in DEV mode (``views.runs``), so that ``toolscope demo``
can show a run and a fork without a key.

Its rules, in order (deterministic: the same request, the same answer):

1. the last tool result it sees failed (a text starting with ``ERROR`` or ``Error``): it calls
   that tool again with the same arguments;
2. no tool result at all in what it receives while tools are offered: it calls a tool, the one
   the history called last if any (same arguments), else the first offered one with the last
   user message as ``{"query": ...}``;
3. otherwise it answers, naming the last tool result it saw.

So a replay policy that leaves a stale result out, or a fork that drops or fails a result,
changes what it does next. Pure: no Flask, no network.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# The model name it answers as, and the fingerprint every answer carries: pages label the
# answers that have it as the scripted demo model's.
MODEL = "toolscope-scripted-demo"
FINGERPRINT = "toolscope-scripted-demo"
ANSWER_PREFIX = "(Scripted demo model)"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _failed(text: str) -> bool:
    return text.lstrip().startswith(("ERROR", "Error", "error:"))


def decide(body: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """What the model does next for a Chat Completions request body: ``(call, None)`` with
    ``call`` = ``{"name", "arguments"}``, or ``(None, text)``."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    calls: dict[str, dict[str, Any]] = {}  # id → {name, arguments}
    last_call: dict[str, Any] | None = None
    last_result: tuple[dict[str, Any] | None, str] | None = None
    last_user = ""
    for m in messages:
        role = m.get("role")
        if role == "user":
            last_user = _text(m.get("content"))
        elif role == "assistant":
            for call in m.get("tool_calls") or []:
                if not isinstance(call, Mapping):
                    continue
                function = call.get("function") or {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                found = {"name": str(function.get("name") or ""), "arguments": arguments}
                calls[str(call.get("id"))] = found
                last_call = found
        elif role == "tool":
            last_result = (calls.get(str(m.get("tool_call_id"))), _text(m.get("content")))
    if last_result is not None:
        call, text = last_result
        if _failed(text) and call is not None:
            return dict(call), None
        name = call["name"] if call is not None else "a tool"
        snippet = " ".join(text.split())
        if len(snippet) > 160:
            snippet = snippet[:159] + "…"
        return None, f"{ANSWER_PREFIX} From {name}: {snippet}"
    tools = [t for t in body.get("tools") or [] if isinstance(t, Mapping)]
    if last_call is not None:
        return dict(last_call), None
    if tools:
        name = str((tools[0].get("function") or {}).get("name") or "tool")
        return {"name": name, "arguments": {"query": last_user}}, None
    return None, f"{ANSWER_PREFIX} You said: {' '.join(last_user.split())[:200]}"


def chat_completion(body: Mapping[str, Any], n: int = 1) -> dict[str, Any]:
    """The Chat Completions answer to ``body`` (``n`` numbers its ids), with usage counted
    roughly from the request's size (four characters a token)."""
    call, text = decide(body)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": f"call_scripted_{n}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(call["arguments"], sort_keys=True),
                },
            }
        ]
    prompt = max(1, len(json.dumps(body, sort_keys=True, default=str)) // 4)
    completion = max(1, len(json.dumps(message, sort_keys=True)) // 4)
    return {
        "id": f"chatcmpl-scripted-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": str(body.get("model") or MODEL),
        "system_fingerprint": FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if call is not None else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def is_scripted(response: Any) -> bool:
    """Whether a stored raw answer came from the scripted demo model."""
    return isinstance(response, Mapping) and response.get("system_fingerprint") == FINGERPRINT
