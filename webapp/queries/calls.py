"""One tool call with everything its detail panel shows, in one query."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select

from ..db import db
from ..models import Channel, Conversation, McpCall, Message, Project, ToolInvocation
from .conversations import FRESHNESS_WINDOW
from .records import CallRecord
from .timeline import call_columns, call_record

MCP_FIELDS = (
    "server",
    "method",
    "transport",
    "session_id",
    "request_id",
    "protocol_version",
    "duration_ms",
    "server_duration_ms",
    "error_type",
    "trace_id",
    "span_id",
)


@dataclass(frozen=True, slots=True)
class CallDetail:
    call: CallRecord
    response: str | None
    arguments_bytes: int
    message_external_id: str
    message_content: str | None
    message_status: str | None
    message_imported: bool
    conversation_id: int | None
    conversation_external_id: str | None
    conversation_title: str | None
    freshness_seconds: int | None
    token_method: str | None
    # How the call went through MCP (docs/otlp-mapping.md, 'MCP calls'); None: it did not.
    mcp: dict[str, Any] | None = None


def get_call(project_id: int, call_id: int) -> CallDetail | None:
    """The call with its message and conversation, or None if not in this project."""
    t = ToolInvocation
    row = db.session.execute(
        select(
            *call_columns(),
            t.response,
            t.token_method,
            Message.external_id.label("message_external_id"),
            Message.content.label("message_content"),
            Message.status.label("message_status"),
            Message.imported.label("message_imported"),
            Conversation.id.label("conversation_id"),
            Conversation.external_id.label("conversation_external_id"),
            Conversation.title.label("conversation_title"),
            FRESHNESS_WINDOW.label("window"),
            *(getattr(McpCall, name).label(f"mcp_{name}") for name in MCP_FIELDS),
        )
        .join(Message, Message.id == t.message_id)
        .outerjoin(McpCall, McpCall.tool_invocation_id == t.id)
        .join(Project, Project.id == t.project_id)
        .outerjoin(Conversation, Conversation.id == Message.conversation_id)
        .outerjoin(Channel, Channel.id == Conversation.channel_id)
        .where(t.id == call_id, t.project_id == project_id)
    ).first()
    if row is None:
        return None
    call = call_record(row)
    if call.response_bytes is None and row.response is not None:
        # Rows stored before response sizes were recorded: measure the text we have anyway.
        call = replace(call, response_bytes=len(row.response.encode()))
    return CallDetail(
        call=call,
        response=row.response,
        arguments_bytes=_json_bytes(row.arguments),
        message_external_id=row.message_external_id,
        message_content=row.message_content,
        message_status=row.message_status,
        message_imported=row.message_imported,
        conversation_id=row.conversation_id,
        conversation_external_id=row.conversation_external_id,
        conversation_title=row.conversation_title,
        freshness_seconds=row.window,
        token_method=row.token_method,
        mcp=(
            {name: getattr(row, f"mcp_{name}") for name in MCP_FIELDS}
            if row.mcp_trace_id is not None
            else None
        ),
    )


def _json_bytes(value: Any) -> int:
    return 0 if value is None else len(json.dumps(value, ensure_ascii=False).encode())
