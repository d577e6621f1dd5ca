"""Stored rows → the JSON objects the API answers with.

Plain functions over plain mappings (and, for conversations, the records ``webapp.queries``
returns), so the same code renders rows read from the database and rows the write path has just
built in memory (the MessageTool answer needs no re-read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from flask import Response, current_app, jsonify
from pydantic_core import PydanticSerializationError, to_json

from ..queries.conversation_list import ConversationRow
from ..queries.records import ConversationRecord

Row = Mapping[str, Any]


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, e.g. `2026-03-10T09:30:00.123456Z`."""
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def duration_ms(started_at: datetime | None, ended_at: datetime | None) -> float | None:
    if started_at is None or ended_at is None:
        return None
    return round((ended_at - started_at).total_seconds() * 1000, 3)


def message_tool(
    row: Row, message_external_id: str, iso_text: Callable[[datetime | None], str | None] = iso
) -> dict[str, Any]:
    """The merged call + response view of `unique_sdk`'s MessageTool API."""
    call_id = str(row["id"])
    response = None
    if row["response"] is not None:
        response = {
            "id": f"{call_id}-response",
            "content": row["response"],
            "toolCallId": row["external_tool_call_id"],
            "createdAt": iso_text(row["response_created_at"]),
        }
    return {
        "id": call_id,
        "object": "messageTool",
        "externalToolCallId": row["external_tool_call_id"],
        "functionName": row["function_name"],
        "arguments": row["arguments"],
        "roundIndex": row["round_index"],
        "sequenceIndex": row["sequence_index"],
        "messageId": message_external_id,
        "response": response,
        "createdAt": iso_text(row["created_at"]),
    }


def message_tools(rows: Iterable[Row], message_external_id: str) -> list[dict[str, Any]]:
    """`message_tool` of rows just written: their times are mostly the same few objects (the
    request's clock), so each object is formatted once. By identity, not equality: equal
    instants in different offsets are written as they came."""
    texts: dict[int, str | None] = {}

    def iso_once(value: datetime | None) -> str | None:
        text = texts.get(id(value), _UNSET)
        if text is _UNSET:
            text = texts[id(value)] = iso(value)
        return text  # type: ignore[return-value]

    return [message_tool(row, message_external_id, iso_once) for row in rows]


_UNSET: Any = object()


def tool_call(row: Row) -> dict[str, Any]:
    response = None
    if row["response"] is not None:
        response = {
            "content": row["response"],
            "created_at": iso(row["response_created_at"]),
            "is_error": bool(row["is_error"]),
        }
    return {
        "id": row["external_tool_call_id"],
        "name": row["function_name"],
        "arguments": row["arguments"],
        "round_index": row["round_index"],
        "sequence_index": row["sequence_index"],
        "created_at": iso(row["created_at"]),
        "started_at": iso(row["started_at"]),
        "ended_at": iso(row["ended_at"]),
        "response": response,
        "redacted": row["redactions"] or None,
        "arguments_tokens": row["arguments_tokens"],
        "response_tokens": row["response_tokens"],
        "response_bytes": row["response_bytes"],
        "token_method": row["token_method"],
        "duration_ms": duration_ms(row["started_at"], row["ended_at"]),
    }


def usage(row: Row) -> dict[str, Any]:
    cost = row["cost_usd"]
    return {
        "round_index": row["round_index"],
        "model": row["model"],
        "provider": row["provider"],
        "input_tokens": row["input_tokens"],
        "output_tokens": row["output_tokens"],
        "cached_tokens": row["cached_tokens"],
        "created_at": iso(row["created_at"]),
        # A string keeps every decimal digit; JSON numbers would become binary floats.
        "cost_usd": None if cost is None else format(cost, "f"),
        "price_source": row["price_source"],
    }


def message(
    row: Row,
    conversation_external_id: str | None,
    calls: Iterable[Row] = (),
    usage_rows: Iterable[Row] = (),
) -> dict[str, Any]:
    return {
        "id": row["external_id"],
        "object": "message",
        "conversation_id": conversation_external_id,
        "role": row["role"],
        "content": row["content"],
        "created_at": iso(row["created_at"]),
        "status": row["status"],
        "model": row["model"],
        "content_tokens": row["content_tokens"],
        "usage": [usage(u) for u in usage_rows],
        "tool_calls": [tool_call(c) for c in calls],
    }


def tool_definition(row: Row) -> dict[str, Any]:
    return {
        "name": row["name"],
        "description": row["description"],
        "parameters": row["parameters"],
    }


def conversation(c: ConversationRecord, tools: Iterable[Row] = ()) -> dict[str, Any]:
    return {
        "id": c.external_id,
        "object": "conversation",
        "title": c.title,
        "channel": c.channel,
        "metadata": c.meta,
        "system_prompt": c.system_prompt,
        "tools": [tool_definition(t) for t in tools],
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
    }


def conversation_summary(c: ConversationRow) -> dict[str, Any]:
    return {
        "id": c.external_id,
        "object": "conversation",
        "title": c.title,
        "channel": c.channel,
        "metadata": c.meta,
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
        "message_count": c.stats.messages,
        "tool_call_count": c.stats.calls,
    }


def channel(row: Row) -> dict[str, Any]:
    return {
        "name": row["name"],
        "object": "channel",
        "freshness_seconds": row["freshness_seconds"],
        "created_at": iso(row["created_at"]),
    }


def redaction_rule(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "redaction_rule",
        "name": row["name"],
        "function_name": row["function_name"],
        "kind": row["kind"],
        "value": list(row["value"] or []),
        "enabled": bool(row["enabled"]),
        "created_at": iso(row["created_at"]),
    }


def listing(data: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": False, **extra}


def fast_json(document: Any, status: int = 200) -> Response:
    """`document` as a JSON response, encoded by pydantic's Rust core (a tenth of the time of
    `jsonify` for a 50-call answer); text it cannot encode (a lone surrogate) goes through
    `jsonify` instead."""
    try:
        payload = to_json(document)
    except (PydanticSerializationError, ValueError, TypeError):
        response = jsonify(document)
        response.status_code = status
        return response
    return current_app.response_class(payload, status=status, mimetype="application/json")
