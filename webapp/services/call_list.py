"""One item of the calls explorer's list, as both its faces answer it: ``GET /api/v1/calls``
and the dashboard's JSON twin ``/calls.json`` (one vocabulary: ``tool_call_id``,
``result_bytes``, ``result_tokens``, ``has_result``, ``result_preview``, the conversation nested
with both of its ids)."""

from __future__ import annotations

from typing import Any

from flask import url_for

from ..queries.call_explorer import CallRow


def call_item(row: CallRow) -> dict[str, Any]:
    """The documented item of a call list (docs/api.md, `GET /calls`)."""
    if row.conversation_id is not None:
        conversation = {
            "id": row.conversation_external_id,
            "row_id": row.conversation_id,
            "title": row.conversation_title or "",
            "channel": row.channel,
        }
        url = url_for(
            "conversations.conversation_get",
            conversation_id=row.conversation_id,
            _anchor=f"call-{row.id}",
            _external=True,
        )
    else:
        conversation = None
        url = url_for("conversations.call_get", call_id=row.id, _external=True)
    return {
        "id": row.id,
        "object": "tool_call",
        "tool_call_id": row.external_tool_call_id,
        "function_name": row.function_name,
        "created_at": row.created_at.isoformat().replace("+00:00", "Z"),
        "duration_ms": row.duration_ms,
        "result_bytes": row.response_bytes,
        "result_tokens": row.response_tokens,
        "is_error": row.is_error,
        "has_result": row.has_response,
        "statuses": list(row.statuses),
        "arguments_preview": row.arguments_preview,
        "result_preview": row.response_preview,
        "message_id": row.message_external_id,
        "conversation": conversation,
        "url": url,
    }
