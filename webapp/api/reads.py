"""Read queries behind the API's answers, each a constant number of statements.

Everything is scoped by project id: another project's ids simply find nothing.
"""

from __future__ import annotations

import base64
import binascii
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select

from ..db import db
from ..errors import ApiError
from ..models import Channel, ToolDefinition
from ..sql import CONVERSATION, MESSAGE, SERVICE_CALL, TOOL
from . import serializers

CHANNEL = Channel.__table__
TOOL_DEFINITION = ToolDefinition.__table__


def message_tools(project_id: int, external_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Tool calls of the given messages (MessageTool view), in the order of the ids asked for,
    then by round and sequence. One query."""
    if not external_ids:
        return []
    rows = db.session.execute(
        select(TOOL, MESSAGE.c.external_id.label("message_external_id"))
        .join(MESSAGE, MESSAGE.c.id == TOOL.c.message_id)
        .where(MESSAGE.c.project_id == project_id, MESSAGE.c.external_id.in_(external_ids))
        .order_by(TOOL.c.message_id, TOOL.c.round_index, TOOL.c.sequence_index)
    ).mappings()
    position = {mid: i for i, mid in enumerate(external_ids)}
    ordered = sorted(rows, key=lambda r: position[r["message_external_id"]])
    return [serializers.message_tool(r, r["message_external_id"]) for r in ordered]


def _calls_and_usage(
    message_ids: Sequence[int],
) -> tuple[dict[int, list[Any]], dict[int, list[Any]]]:
    calls: dict[int, list[Any]] = defaultdict(list)
    usage: dict[int, list[Any]] = defaultdict(list)
    if not message_ids:
        return calls, usage
    for row in db.session.execute(
        select(TOOL)
        .where(TOOL.c.message_id.in_(message_ids))
        .order_by(TOOL.c.message_id, TOOL.c.round_index, TOOL.c.sequence_index)
    ).mappings():
        calls[row["message_id"]].append(row)
    for row in db.session.execute(
        select(SERVICE_CALL)
        .where(SERVICE_CALL.c.message_id.in_(message_ids))
        .order_by(SERVICE_CALL.c.message_id, SERVICE_CALL.c.round_index)
    ).mappings():
        usage[row["message_id"]].append(row)
    return calls, usage


def _messages_by_ids(message_ids: Iterable[int]) -> list[Any]:
    return list(
        db.session.execute(
            select(MESSAGE).where(MESSAGE.c.id.in_(sorted(set(message_ids))))
        ).mappings()
    )


def messages_out(message_ids: Sequence[int], conversation_external_id: str) -> list[dict[str, Any]]:
    """Messages with their calls and usage, in the order given. Three queries."""
    rows = {r["id"]: r for r in _messages_by_ids(message_ids)}
    calls, usage = _calls_and_usage(list(rows))
    return [
        serializers.message(rows[i], conversation_external_id, calls[i], usage[i])
        for i in message_ids
    ]


def _conversation_row(project_id: int, external_id: str) -> Any:
    return (
        db.session.execute(
            select(CONVERSATION, CHANNEL.c.name.label("channel"))
            .outerjoin(CHANNEL, CHANNEL.c.id == CONVERSATION.c.channel_id)
            .where(
                CONVERSATION.c.project_id == project_id,
                CONVERSATION.c.external_id == external_id,
            )
        )
        .mappings()
        .first()
    )


def _tool_definitions(conversation_id: int) -> list[Any]:
    return list(
        db.session.execute(
            select(TOOL_DEFINITION)
            .where(TOOL_DEFINITION.c.conversation_id == conversation_id)
            .order_by(TOOL_DEFINITION.c.id)
        ).mappings()
    )


def conversation_out(project_id: int, external_id: str) -> dict[str, Any]:
    """The conversation without its messages (the answer to PUT). Two queries."""
    row = _conversation_row(project_id, external_id)
    if row is None:
        raise not_found(external_id)
    return serializers.conversation(row, _tool_definitions(row["id"]))


def conversation_detail(project_id: int, external_id: str) -> dict[str, Any]:
    """The conversation with every message, call and usage row. Five queries, whatever size."""
    row = _conversation_row(project_id, external_id)
    if row is None:
        raise not_found(external_id)
    out = serializers.conversation(row, _tool_definitions(row["id"]))
    messages = list(
        db.session.execute(
            select(MESSAGE)
            .where(MESSAGE.c.conversation_id == row["id"])
            .order_by(MESSAGE.c.created_at, MESSAGE.c.id)
        ).mappings()
    )
    calls, usage = _calls_and_usage([m["id"] for m in messages])
    out["messages"] = [
        serializers.message(m, external_id, calls[m["id"]], usage[m["id"]]) for m in messages
    ]
    return out


def not_found(external_id: str) -> ApiError:
    return ApiError(404, f"conversation {external_id!r} not found in this project")


# --- Conversation list (keyset paging on (updated_at, id), newest first) ------------------------


def encode_cursor(updated_at: datetime, row_id: int) -> str:
    raw = f"{updated_at.isoformat()}|{row_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, row_id = raw.partition("|")
        updated_at = datetime.fromisoformat(stamp)
        if updated_at.tzinfo is None:
            raise ValueError("cursor times are UTC with an offset")
        return updated_at, int(row_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(
            422,
            "query.cursor: not a cursor returned by this API",
            [{"field": "query.cursor", "message": "not a cursor returned by this API"}],
        ) from None


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def list_conversations(
    project_id: int, *, channel: str | None, q: str | None, limit: int, cursor: str | None
) -> dict[str, Any]:
    """One page of conversation summaries with message and call counts. One query."""
    message_counts = (
        select(MESSAGE.c.conversation_id, func.count().label("n"))
        .where(MESSAGE.c.project_id == project_id)
        .group_by(MESSAGE.c.conversation_id)
        .subquery()
    )
    call_counts = (
        select(MESSAGE.c.conversation_id, func.count().label("n"))
        .join(TOOL, TOOL.c.message_id == MESSAGE.c.id)
        .where(MESSAGE.c.project_id == project_id)
        .group_by(MESSAGE.c.conversation_id)
        .subquery()
    )
    stmt = (
        select(
            CONVERSATION,
            CHANNEL.c.name.label("channel"),
            func.coalesce(message_counts.c.n, 0).label("message_count"),
            func.coalesce(call_counts.c.n, 0).label("tool_call_count"),
        )
        .outerjoin(CHANNEL, CHANNEL.c.id == CONVERSATION.c.channel_id)
        .outerjoin(message_counts, message_counts.c.conversation_id == CONVERSATION.c.id)
        .outerjoin(call_counts, call_counts.c.conversation_id == CONVERSATION.c.id)
        .where(CONVERSATION.c.project_id == project_id)
        .order_by(CONVERSATION.c.updated_at.desc(), CONVERSATION.c.id.desc())
        .limit(limit + 1)
    )
    if channel:
        stmt = stmt.where(CHANNEL.c.name == channel)
    if q:
        pattern = f"%{_escape_like(q.lower())}%"
        stmt = stmt.where(
            or_(
                func.lower(CONVERSATION.c.external_id).like(pattern, escape="\\"),
                func.lower(CONVERSATION.c.title).like(pattern, escape="\\"),
            )
        )
    if cursor:
        updated_at, row_id = decode_cursor(cursor)
        stmt = stmt.where(
            or_(
                CONVERSATION.c.updated_at < updated_at,
                and_(CONVERSATION.c.updated_at == updated_at, CONVERSATION.c.id < row_id),
            )
        )
    rows = list(db.session.execute(stmt).mappings())
    has_more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = (
        encode_cursor(rows[-1]["updated_at"], rows[-1]["id"]) if has_more and rows else None
    )
    return {
        "object": "list",
        "data": [serializers.conversation_summary(r) for r in rows],
        "has_more": has_more,
        "next_cursor": next_cursor,
    }
