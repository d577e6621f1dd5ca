"""One conversation, or a few, as a :class:`ConversationRecord`: by row id (the dashboard's
URLs), by external id (the API's) or by a list of row ids (the charts). One query each.

The replay freshness window of a conversation is its channel's, else its project's (None: no
window); :data:`FRESHNESS_WINDOW` is that rule, written once, for every read that needs it.

:func:`read_state` reads what the replay answer cache checks its entries against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, func, select

from ..db import db
from ..models import Channel, Conversation, Project, ReplayState, ToolDefinition
from .records import ConversationRecord

FRESHNESS_WINDOW = func.coalesce(Channel.freshness_seconds, Project.freshness_seconds)

# (conversation.revision, replay_state.version) as one statement read them.
State = tuple[int, int]

_STATE = select(
    Conversation.revision,
    select(ReplayState.version).where(ReplayState.id == 1).scalar_subquery(),
)


def _select(project_id: int) -> Select[Any]:
    """The project's conversations with their channel name and freshness window (joins
    ``Project`` and, outer, ``Channel``)."""
    return (
        select(
            Conversation,
            Channel.name.label("channel_name"),
            FRESHNESS_WINDOW.label("freshness_seconds"),
        )
        .join(Project, Project.id == Conversation.project_id)
        .outerjoin(Channel, Channel.id == Conversation.channel_id)
        .where(Conversation.project_id == project_id)
    )


def _record(row: Any) -> ConversationRecord:
    c = row.Conversation
    return ConversationRecord(
        id=c.id,
        external_id=c.external_id,
        title=c.title or "",
        channel=row.channel_name,
        meta=c.meta or {},
        system_prompt=c.system_prompt,
        created_at=c.created_at,
        updated_at=c.updated_at,
        freshness_seconds=row.freshness_seconds,
    )


def find_conversation(
    project_id: int, *, row_id: int | None = None, external_id: str | None = None
) -> ConversationRecord | None:
    """The project's conversation with that row id or external id, or None (another project's
    conversation is not found either)."""
    if row_id is not None:
        stmt = _select(project_id).where(Conversation.id == row_id)
    elif external_id is not None:
        stmt = _select(project_id).where(Conversation.external_id == external_id)
    else:
        raise TypeError("find_conversation needs row_id or external_id")
    row = db.session.execute(stmt).first()
    return _record(row) if row is not None else None


def find_conversations(project_id: int, row_ids: Sequence[int]) -> list[ConversationRecord]:
    """The project's conversations among ``row_ids`` (others are left out), by row id."""
    if not row_ids:
        return []
    stmt = _select(project_id).where(Conversation.id.in_(row_ids)).order_by(Conversation.id)
    return [_record(row) for row in db.session.execute(stmt)]


def tool_definition_names(conversation_id: int) -> list[str]:
    return list(
        db.session.scalars(
            select(ToolDefinition.name)
            .where(ToolDefinition.conversation_id == conversation_id)
            .order_by(ToolDefinition.name)
        )
    )


def read_state(conversation_id: int) -> State | None:
    """The conversation's revision and the replay state's version, in one statement; None if
    the conversation is gone. Every write that changes what the replay reads moves one of them
    (see ``webapp.services.replay_cache``)."""
    row = db.session.execute(_STATE.where(Conversation.id == conversation_id)).first()
    if row is None:
        return None
    return int(row[0]), int(row[1] or 0)
