"""One tool call with everything its detail panel shows, in one query."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from ..db import db
from ..models import Channel, Conversation, Message, Project, ToolInvocation
from .records import CallRecord


@dataclass(frozen=True, slots=True)
class CallDetail:
    call: CallRecord
    response: str | None
    arguments_bytes: int
    message_external_id: str
    message_content: str | None
    message_status: str | None
    conversation_id: int | None
    conversation_external_id: str | None
    conversation_title: str | None
    freshness_seconds: int | None
    token_method: str | None


def get_call(project_id: int, call_id: int) -> CallDetail | None:
    """The call with its message and conversation, or None if not in this project."""
    t = ToolInvocation
    row = db.session.execute(
        select(
            t,
            Message.external_id.label("message_external_id"),
            Message.content.label("message_content"),
            Message.status.label("message_status"),
            Conversation.id.label("conversation_id"),
            Conversation.external_id.label("conversation_external_id"),
            Conversation.title.label("conversation_title"),
            func.coalesce(Channel.freshness_seconds, Project.freshness_seconds).label("window"),
        )
        .join(Message, Message.id == t.message_id)
        .join(Project, Project.id == t.project_id)
        .outerjoin(Conversation, Conversation.id == Message.conversation_id)
        .outerjoin(Channel, Channel.id == Conversation.channel_id)
        .where(t.id == call_id, t.project_id == project_id)
    ).first()
    if row is None:
        return None
    inv: ToolInvocation = row.ToolInvocation
    return CallDetail(
        call=_record(inv),
        response=inv.response,
        arguments_bytes=_json_bytes(inv.arguments),
        message_external_id=row.message_external_id,
        message_content=row.message_content,
        message_status=row.message_status,
        conversation_id=row.conversation_id,
        conversation_external_id=row.conversation_external_id,
        conversation_title=row.conversation_title,
        freshness_seconds=row.window,
        token_method=inv.token_method,
    )


def _json_bytes(value: Any) -> int:
    return 0 if value is None else len(json.dumps(value, ensure_ascii=False).encode())


def _record(inv: ToolInvocation) -> CallRecord:
    response = inv.response
    return CallRecord(
        id=inv.id,
        message_id=inv.message_id,
        round_index=inv.round_index,
        sequence_index=inv.sequence_index,
        external_tool_call_id=inv.external_tool_call_id or "",
        function_name=inv.function_name,
        arguments=inv.arguments,
        created_at=inv.created_at,
        started_at=inv.started_at,
        ended_at=inv.ended_at,
        has_response=response is not None,
        response_created_at=inv.response_created_at,
        is_error=bool(inv.is_error),
        redactions=tuple(inv.redactions or ()),
        arguments_tokens=inv.arguments_tokens,
        response_tokens=inv.response_tokens,
        response_bytes=inv.response_bytes
        if inv.response_bytes is not None
        else (len(response.encode()) if response is not None else None),
        list_response=response if response is not None and response.startswith("[") else None,
    )
