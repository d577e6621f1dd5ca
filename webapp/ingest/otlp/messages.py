"""The normalized message model and the readers of every shape producers send it in
(docs/otlp-mapping.md, 'The message model').

A message is `{"role", "parts", "finish_reason"?}`; a part is one of
`{"type": "text", "content"}`, `{"type": "tool_call", "id", "name", "arguments"}`,
`{"type": "tool_call_response", "id", "response"}` or `{"type": "other", "kind"}`.
Plain dicts, so a normalized record is stored as JSON as it is.

Shapes read here: the semconv parts schema (`gen_ai.input.messages`, as a JSON string on spans
or structured on log records), OpenAI chat messages (legacy events, `input.value` bodies,
flattened OpenLLMetry and OpenInference attributes once unflattened), and provider content
blocks inside a content string (Anthropic `tool_use`/`tool_result`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...replay.jsonfast import dumps, loads
from .records import SURROGATE_ESCAPE_TEXT, without_surrogates

Message = dict[str, Any]
Part = dict[str, Any]

ROLES = ("system", "developer", "user", "assistant", "tool")
# `tool-calls`: the Vercel AI SDK's spelling.
TOOL_FINISH_REASONS = frozenset(
    {"tool_calls", "tool_call", "tool_use", "function_call", "tool-calls"}
)

# Content values longer than this are not parsed as JSON: they stay opaque strings. The app
# passes TOOLSCOPE_MAX_RESULT_BYTES; this default serves the pure tests.
DEFAULT_PARSE_LIMIT = 2 * 1024 * 1024


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_json(value: str, limit: int) -> Any:
    """`value` parsed as JSON, or None when it is not JSON (NaN and Infinity included: nothing
    stored may hold them) or too large to parse.

    pydantic-core's parser (`jsonfast.loads`) reads it first: 2-3 times faster than
    `json.loads` for the message lists every GenAI span carries. It refuses whatever it would
    read otherwise than `json.loads` (a lone surrogate escape, deeper nesting, a number over
    4300 digits, a BOM, NaN), so what it refuses takes the standard library's path, the
    reference: the value is the same either way (tests/test_otlp_load_json.py). What it reads
    holds no lone surrogate, so needs no repair."""
    if len(value) > limit:
        return None
    try:
        return loads(value, allow_nan=False)
    except ValueError:
        pass
    return _load_json_stdlib(value)


def _load_json_stdlib(value: str) -> Any:
    """`load_json` with the standard library's parser (what pydantic-core refuses)."""
    try:
        parsed = json.loads(value, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    if SURROGATE_ESCAPE_TEXT.search(value):
        # A JavaScript exporter cuts strings inside an emoji: half a pair becomes U+FFFD.
        parsed = without_surrogates(parsed)
    return parsed


def arguments_of(value: Any, limit: int = DEFAULT_PARSE_LIMIT) -> dict[str, Any] | None:
    """Tool-call arguments as stored: an object as it is, a JSON string parsed when it
    holds an object, any other text as `{"_raw": text}`; None when absent (not captured)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        parsed = load_json(value, limit)
        return parsed if isinstance(parsed, dict) else {"_raw": value}
    try:
        return {"_raw": dumps(value, allow_nan=False)}
    except ValueError:
        return {"_raw": str(value)}


def result_of(value: Any) -> str | None:
    """A tool result as stored: text verbatim (never re-serialized), structure as compact JSON."""
    if value is None or isinstance(value, str):
        return value
    try:
        return dumps(value, allow_nan=False)
    except ValueError:
        return str(value)


def text_part(content: str) -> Part:
    return {"type": "text", "content": content}


def tool_call_part(call_id: Any, name: Any, arguments: Any, limit: int) -> Part:
    return {
        "type": "tool_call",
        "id": call_id if isinstance(call_id, str) else ("" if call_id is None else str(call_id)),
        "name": name if isinstance(name, str) else ("" if name is None else str(name)),
        "arguments": arguments_of(arguments, limit),
    }


def response_part(call_id: Any, response: Any) -> Part:
    return {
        "type": "tool_call_response",
        "id": call_id if isinstance(call_id, str) else ("" if call_id is None else str(call_id)),
        "response": result_of(response),
    }


def message(role: Any, parts: list[Part], finish_reason: Any = None) -> Message:
    out: Message = {"role": role if isinstance(role, str) else "user", "parts": parts}
    if isinstance(finish_reason, str) and finish_reason:
        out["finish_reason"] = finish_reason
    return out


# --- The semconv parts schema (gen_ai.input.messages / output.messages) ----------------------


def semconv_messages(value: Any, limit: int = DEFAULT_PARSE_LIMIT) -> list[Message] | None:
    """`gen_ai.{input,output}.messages`: a JSON string (spans) or structured (log records).
    None when the value is absent or not a list of messages."""
    if isinstance(value, str):
        value = load_json(value, limit)
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        if not isinstance(item, Mapping):
            return None
        parts = item.get("parts")
        if not isinstance(parts, list):
            # Some producers send OpenAI chat messages under the semconv key.
            out.append(chat_message(item.get("role"), item, limit))
            continue
        out.append(
            message(
                item.get("role"),
                [semconv_part(p, limit) for p in parts if isinstance(p, Mapping)],
                item.get("finish_reason"),
            )
        )
    return out


def semconv_part(part: Mapping[str, Any], limit: int) -> Part:
    kind = part.get("type")
    if kind == "text" and "content" not in part:
        # The structure without the text: content capture is off (pydantic-ai sends this).
        return {"type": "other", "kind": "text"}
    if kind == "text":
        content = part.get("content")
        return text_part(content if isinstance(content, str) else result_of(content) or "")
    if kind == "tool_call":
        return tool_call_part(part.get("id"), part.get("name"), part.get("arguments"), limit)
    if kind == "tool_call_response":
        # The JSON schema names it `response`; the spec's example and pydantic-ai say `result`.
        value = part["response"] if "response" in part else part.get("result")
        # A result as a list of text blocks (Strands: `[{"text": ...}]`) is their text.
        value = _content_text(value, limit)
        out = response_part(part.get("id"), value)
        if isinstance(part.get("name"), str):
            out["name"] = part["name"]
        return out
    return {"type": "other", "kind": str(kind)}


def system_instructions(value: Any, limit: int = DEFAULT_PARSE_LIMIT) -> str | None:
    """`gen_ai.system_instructions`: a parts list, a JSON string of one, or plain text."""
    if isinstance(value, str):
        parsed = load_json(value, limit) if value.lstrip().startswith("[") else None
        if parsed is None:
            return value
        value = parsed
    if isinstance(value, list):
        texts = [
            p["content"]
            for p in value
            if isinstance(p, Mapping)
            and p.get("type") == "text"
            and isinstance(p.get("content"), str)
        ]
        texts += [p for p in value if isinstance(p, str)]
        return "\n\n".join(texts) if texts else None
    return None


# --- OpenAI chat messages (legacy events, request bodies, unflattened attributes) -------------


def chat_message(role: Any, body: Mapping[str, Any], limit: int) -> Message:
    """An OpenAI-chat-shaped message: `content`, `tool_calls`, `tool_call_id`; the body's own
    `role` overrides the one implied by where it came from."""
    role = body.get("role") if isinstance(body.get("role"), str) else role
    parts: list[Part] = []
    content = body.get("content")
    call_id = body.get("tool_call_id", body.get("id") if role == "tool" else None)
    results = _result_blocks(content, limit) if role == "tool" else None
    if results:
        parts.extend(results)  # one tool message with N result blocks (Strands)
    elif role == "tool":
        parts.append(response_part(call_id, _content_text(content, limit)))
    else:
        parts.extend(content_parts(content, limit))
    for call in _as_list(body.get("tool_calls")):
        if not isinstance(call, Mapping):
            continue
        call = call.get("tool_call", call)  # OpenInference nests each call one level deeper
        function = call.get("function") if isinstance(call.get("function"), Mapping) else call
        parts.append(
            tool_call_part(call.get("id"), function.get("name"), function.get("arguments"), limit)
        )
    legacy = body.get("function_call")
    if isinstance(legacy, Mapping):
        parts.append(tool_call_part("", legacy.get("name"), legacy.get("arguments"), limit))
    return message(role, parts, body.get("finish_reason"))


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):  # unflattened lists come back as lists; be lenient anyway
        return list(value.values())
    return []


def _result_blocks(content: Any, limit: int) -> list[Part] | None:
    """A tool message whose content is a list of result blocks (Anthropic `tool_result`, Bedrock
    `toolResult`, possibly as a JSON string): one result part per block."""
    if isinstance(content, str) and content.startswith("[{"):
        content = load_json(content, limit)
    if not isinstance(content, list) or not content:
        return None
    if not all(
        isinstance(b, Mapping) and (b.get("type") == "tool_result" or "toolResult" in b)
        for b in content
    ):
        return None
    return _blocks(content, limit)


def _content_text(content: Any, limit: int) -> Any:
    """A tool message's content: text as it is, a list of text blocks joined."""
    if isinstance(content, list):
        texts = [
            b.get("text")
            for b in content
            if isinstance(b, Mapping) and isinstance(b.get("text"), str)
        ]
        if texts and len(texts) == len(content):
            return "\n\n".join(texts)
    return content


def content_parts(content: Any, limit: int) -> list[Part]:
    """Parts of a message's `content`: a string (which may itself hold a JSON array of provider
    content blocks), or a list of blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        if content.startswith("[{"):
            blocks = load_json(content, limit)
            if isinstance(blocks, list) and blocks and all(_is_block(b) for b in blocks):
                return _blocks(blocks, limit)
        return [text_part(content)]
    if isinstance(content, list):
        return _blocks(content, limit)
    return [text_part(result_of(content) or "")]


# Bedrock Converse content blocks (Strands) have no `type`: their one key says what they are.
_BEDROCK_BLOCKS = ("text", "toolUse", "toolResult")


def _is_block(value: Any) -> bool:
    return isinstance(value, Mapping) and (
        isinstance(value.get("type"), str)
        or (len(value) == 1 and next(iter(value)) in _BEDROCK_BLOCKS)
    )


def _blocks(blocks: Iterable[Any], limit: int) -> list[Part]:
    parts: list[Part] = []
    for block in blocks:
        if isinstance(block, str):
            parts.append(text_part(block))
            continue
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind is None and len(block) == 1:  # Bedrock Converse: {"text"}, {"toolUse"}, ...
            kind, inner = next(iter(block.items()))
            if kind == "text" and isinstance(inner, str):
                parts.append(text_part(inner))
                continue
            if kind == "toolUse" and isinstance(inner, Mapping):
                parts.append(
                    tool_call_part(
                        inner.get("toolUseId"), inner.get("name"), inner.get("input"), limit
                    )
                )
                continue
            if kind == "toolResult" and isinstance(inner, Mapping):
                text = _content_text(inner.get("content"), limit)
                parts.append(response_part(inner.get("toolUseId"), text))
                continue
        if kind in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
            parts.append(text_part(block["text"]))
        elif kind == "tool_use":
            parts.append(
                tool_call_part(block.get("id"), block.get("name"), block.get("input"), limit)
            )
        elif kind == "tool_result":
            parts.append(
                response_part(block.get("tool_use_id"), _content_text(block.get("content"), limit))
            )
        elif isinstance(block.get("message_content"), Mapping):  # OpenInference contents.<k>
            inner = block["message_content"]
            if isinstance(inner.get("text"), str):
                parts.append(text_part(inner["text"]))
        else:
            parts.append({"type": "other", "kind": str(kind)})
    return parts


def chat_messages(value: Any, limit: int) -> list[Message] | None:
    """A list of OpenAI chat messages (a request body's `messages`, `gen_ai.prompt`)."""
    if isinstance(value, str):
        value = load_json(value, limit)
    if not isinstance(value, list):
        return None
    return [chat_message(m.get("role"), m, limit) for m in value if isinstance(m, Mapping)]


def choice_messages(value: Any, limit: int) -> list[Message] | None:
    """Output messages from an OpenAI response body's `choices` (choice order kept)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("choices"), list):
        return None
    out = []
    for choice in value["choices"]:
        if isinstance(choice, Mapping) and isinstance(choice.get("message"), Mapping):
            m = chat_message("assistant", choice["message"], limit)
            if isinstance(choice.get("finish_reason"), str):
                m["finish_reason"] = choice["finish_reason"]
            out.append(m)
    return out


# --- Flattened attributes (OpenLLMetry legacy, OpenInference) ---------------------------------

_INDEXED = re.compile(r"^(\d+)\.(.+)$")


def unflatten(attributes: Mapping[str, Any], prefix: str) -> list[Any] | None:
    """`prefix.<i>.a.<j>.b` keys as nested lists (ordered by number, not text) and dicts."""
    head = prefix + "."
    tree: dict[int, Any] = {}
    found = False
    for key, value in attributes.items():
        if not key.startswith(head):
            continue
        match = _INDEXED.match(key[len(head) :])
        if match is None:
            continue
        found = True
        node = tree.setdefault(int(match.group(1)), {})
        _insert(node, match.group(2).split("."), value)
    return _lists(tree) if found else None


def _insert(node: dict[Any, Any], path: list[str], value: Any) -> None:
    for segment in path[:-1]:
        key: Any = int(segment) if segment.isdigit() else segment
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    last = path[-1]
    node[int(last) if last.isdigit() else last] = value


def _lists(node: Any) -> Any:
    """Dicts keyed by ints become lists, ordered by the int."""
    if not isinstance(node, dict):
        return node
    if node and all(isinstance(k, int) for k in node):
        return [_lists(node[k]) for k in sorted(node)]
    return {k: _lists(v) for k, v in node.items()}


def flattened_messages(
    attributes: Mapping[str, Any], prefix: str, limit: int
) -> list[Message] | None:
    """`gen_ai.prompt.<i>.*` / `gen_ai.completion.<i>.*` (OpenLLMetry legacy) or
    `llm.input_messages.<i>.message.*` (OpenInference) as messages."""
    items = unflatten(attributes, prefix)
    if items is None:
        return None
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        body = item.get("message", item)  # OpenInference nests under `message`
        if not isinstance(body, dict):
            continue
        body = dict(body)
        if "contents" in body and body.get("content") is None:
            body["content"] = _as_list(body.pop("contents"))
        role = body.get("role") or ("assistant" if "completion" in prefix else "user")
        m = chat_message(role, body, limit)
        finish = item.get("finish_reason")
        if isinstance(finish, str) and finish:
            m["finish_reason"] = finish
        out.append(m)
    return out


# --- Reading normalized messages --------------------------------------------------------------


def text_of(m: Message) -> str | None:
    texts = [p["content"] for p in m["parts"] if p["type"] == "text"]
    return "\n\n".join(texts) if texts else None


def is_user_prompt(m: Message) -> bool:
    """A user message with at least one part that is not a tool result (pydantic v5 sends
    results in `user` messages)."""
    return m["role"] == "user" and any(p["type"] != "tool_call_response" for p in m["parts"])


def tool_calls(m: Message) -> list[Part]:
    return [p for p in m["parts"] if p["type"] == "tool_call"]


def last_user_index(messages: list[Message]) -> int:
    """Index of the last user prompt, -1 if none."""
    for i in range(len(messages) - 1, -1, -1):
        if is_user_prompt(messages[i]):
            return i
    return -1


def tail(messages: list[Message]) -> list[Message]:
    """The messages after the last user prompt (all of them when there is none)."""
    return messages[last_user_index(messages) + 1 :]


def head(messages: list[Message]) -> list[Message]:
    """The messages up to and including the last user prompt."""
    return messages[: last_user_index(messages) + 1]


def finish_reasons(value: Any, limit: int = DEFAULT_PARSE_LIMIT) -> list[str] | None:
    """`gen_ai.response.finish_reasons`: a string[], a JSON-encoded string[], or one string."""
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    if isinstance(value, str):
        if value.startswith("["):
            parsed = load_json(value, limit)
            if isinstance(parsed, list):
                return [v for v in parsed if isinstance(v, str)]
        return [value]
    return None
