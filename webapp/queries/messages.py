"""Messages with their tool calls and usage, as stored rows (mappings of column values), for the
API's answers: a constant number of statements each, scoped by project where an id comes from
the request (another project's ids simply find nothing)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select

from ..db import db
from ..sql import MESSAGE, SERVICE_CALL, TOOL, TOOL_DEFINITION

Row = Any  # a RowMapping: column name -> value


def message_tools(project_id: int, external_ids: Sequence[str]) -> list[Row]:
    """Tool calls of the given messages with ``message_external_id``, in the order of the ids
    asked for, then by round and sequence. One query."""
    if not external_ids:
        return []
    rows = db.session.execute(
        select(TOOL, MESSAGE.c.external_id.label("message_external_id"))
        .join(MESSAGE, MESSAGE.c.id == TOOL.c.message_id)
        .where(MESSAGE.c.project_id == project_id, MESSAGE.c.external_id.in_(external_ids))
        .order_by(TOOL.c.message_id, TOOL.c.round_index, TOOL.c.sequence_index)
    ).mappings()
    position = {mid: i for i, mid in enumerate(external_ids)}
    return sorted(rows, key=lambda r: position[r["message_external_id"]])


def calls_and_usage(
    message_ids: Sequence[int],
) -> tuple[dict[int, list[Row]], dict[int, list[Row]]]:
    """Tool calls (by round and sequence) and usage (by round) per message id. Two queries."""
    calls: dict[int, list[Row]] = defaultdict(list)
    usage: dict[int, list[Row]] = defaultdict(list)
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


def messages_by_id(message_ids: Iterable[int]) -> dict[int, Row]:
    """The message rows of ``message_ids``, by id. One query."""
    rows = db.session.execute(
        select(MESSAGE).where(MESSAGE.c.id.in_(sorted(set(message_ids))))
    ).mappings()
    return {r["id"]: r for r in rows}


def conversation_messages(conversation_id: int) -> list[Row]:
    """Every message of the conversation, in time order. One query."""
    return list(
        db.session.execute(
            select(MESSAGE)
            .where(MESSAGE.c.conversation_id == conversation_id)
            .order_by(MESSAGE.c.created_at, MESSAGE.c.id)
        ).mappings()
    )


def tool_definitions(conversation_id: int) -> list[Row]:
    """The tools the conversation offers, in the order they were given. One query."""
    return list(
        db.session.execute(
            select(TOOL_DEFINITION)
            .where(TOOL_DEFINITION.c.conversation_id == conversation_id)
            .order_by(TOOL_DEFINITION.c.id)
        ).mappings()
    )
