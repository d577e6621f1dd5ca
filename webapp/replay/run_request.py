"""The request a run sends: a replay payload turned into the keyword arguments of the official
SDK's call, and the key that recognises the same request again (issue 25, item 2).

* ``openai-chat``: ``client.chat.completions.create(**body)`` with ``model``, ``messages``,
  ``tools``, ``temperature``, ``max_tokens``;
* ``openai-responses``: ``client.responses.create(**body)`` with ``model``, ``input``,
  ``instructions``, ``tools``, ``temperature``, ``max_output_tokens``;
* ``anthropic``: ``client.messages.create(**body)`` with ``model``, ``system``, ``messages``,
  ``tools`` and ``max_tokens``, which Anthropic requires (1024 when not given).

Anthropic has no sampling parameters any more: API version 2026-10-21, which the SDK (2.x,
pinned in pyproject.toml) sends, answers 400 to ``temperature`` at any value, and the SDK's
``messages.create`` has no such argument (a TypeError before anything is sent). So an
Anthropic body never holds a temperature, whatever was asked; :data:`TEMPERATURE_FORMATS` says
which formats send one, for a caller that shows or keys on it.

A key is left out when it has nothing in it (no tools, no system prompt, no temperature, no
token limit): the provider's default applies then, and an OpenAI-compatible server that does
not know a parameter is never sent it. The payload keys are those ``formats.py`` renders.

The body is a deep copy: a payload shares sub-objects with the history (``formats.py``), and a
run stores the body it sent, so neither may change the other. It holds no credentials: the
SDK client adds them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .options import FORMATS

# Anthropic requires max_tokens; enough for a round of calls or a short answer.
DEFAULT_ANTHROPIC_MAX_TOKENS = 1024

# The formats whose body carries ``temperature`` (module docstring: Anthropic's does not).
TEMPERATURE_FORMATS: tuple[str, ...] = ("openai-chat", "openai-responses")

# The SDK call each format's body is for, as "client.<path>" (for docs, logs and errors).
SDK_CALLS: dict[str, str] = {
    "openai-chat": "client.chat.completions.create",
    "openai-responses": "client.responses.create",
    "anthropic": "client.messages.create",
}


def request_body(
    fmt: str,
    payload: Mapping[str, Any],
    *,
    model: str,
    temperature: float | None = 0.0,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """The SDK call's keyword arguments for a replay ``payload`` in format ``fmt`` (the
    ``payload`` of the replay's export document). ``temperature`` is not sent to Anthropic
    (module docstring). Raises ValueError for an unknown format, an
    empty model or a payload without its message list."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not model:
        raise ValueError("a model is required")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    messages_key = "input" if fmt == "openai-responses" else "messages"
    messages = payload.get(messages_key)
    if not isinstance(messages, list):
        raise ValueError(f"a {fmt} payload has a list under {messages_key!r}")
    body: dict[str, Any] = {"model": model}
    if fmt == "openai-responses" and payload.get("instructions"):
        body["instructions"] = payload["instructions"]
    if fmt == "anthropic" and payload.get("system"):
        body["system"] = payload["system"]
    body[messages_key] = copy.deepcopy(messages)
    tools = payload.get("tools")
    if tools:
        body["tools"] = copy.deepcopy(tools)
    if temperature is not None and fmt in TEMPERATURE_FORMATS:
        body["temperature"] = temperature
    if fmt == "openai-chat":
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
    elif fmt == "openai-responses":
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
    else:
        body["max_tokens"] = max_tokens if max_tokens is not None else DEFAULT_ANTHROPIC_MAX_TOKENS
    return body


def canonical_bytes(value: Any) -> bytes:
    """Canonical JSON (keys sorted, compact, UTF-8): equal values, equal bytes."""
    return json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode("utf-8")


def request_key(connection_id: int, body: Mapping[str, Any]) -> str:
    """The sha256 (hex) of the connection and the exact body: two runs with the same key asked
    the same model the same question on the same connection, so the second may be answered
    from the first ("nobody pays twice"; whether it may, temperature 0 and no ``fresh``, is the
    caller's rule). Key order in the body does not matter."""
    return hashlib.sha256(canonical_bytes({"connection": connection_id, "body": body})).hexdigest()
