"""Conversations and channels: found or created by external id, updated, touched.

The conversation row is the last thing a write updates (its `updated_at` is last activity), so
on PostgreSQL concurrent writers always lock messages before updating conversations. Before
either, a writer holds its conversation `FOR KEY SHARE` (`ensure_conversation`): writers do not
wait for each other on it, but a delete (`ingest.deletes`, `FOR UPDATE` first) waits for them,
and they for it; a writer that waited for a delete finds the row gone and creates it again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, select, update

from ..db import db
from ..sql import CHANNEL, CONVERSATION, TOOL_DEFINITION, dialect_insert
from .errors import Duplicate, Invalid, RaceLost
from .values import clean_json, clean_text, compact_json

# The writer's hold on its conversation until it commits (PostgreSQL; SQLite has one writer):
# FOR KEY SHARE does not conflict with other writers (nor with their UPDATE of the row), only
# with a delete's FOR UPDATE. A row deleted meanwhile is not returned, once the delete commits.
_HOLD_CONVERSATION = (
    select(CONVERSATION.c.id, CONVERSATION.c.external_id)
    .where(
        CONVERSATION.c.project_id == bindparam("project_id"),
        CONVERSATION.c.external_id == bindparam("external_id"),
    )
    .with_for_update(read=True, key_share=True)
)


def find_conversation(project_id: int, external_id: str) -> Any:
    """The conversation's row, held until the write commits (`_HOLD_CONVERSATION`)."""
    params = {"project_id": project_id, "external_id": external_id}
    return db.session.execute(_HOLD_CONVERSATION, params).first()


def ensure_conversation(
    project_id: int, external_id: str, now: datetime, created_at: datetime | None = None
) -> tuple[int, bool]:
    """The conversation's row id, created if unknown; (id, created). Held until the write
    commits, so that a concurrent delete waits for it (and inserts referencing it cannot fail
    on a row deleted meanwhile): the first thing a write locks."""
    found = find_conversation(project_id, external_id)
    if found is not None:
        return found.id, False
    stmt = (
        dialect_insert(CONVERSATION)
        .values(
            project_id=project_id,
            external_id=external_id,
            title="",
            metadata={},
            created_at=created_at or now,
            updated_at=now,
        )
        .on_conflict_do_nothing()
        .returning(CONVERSATION.c.id)
    )
    new_id = db.session.execute(stmt).scalar()
    if new_id is None:
        raise RaceLost()
    return new_id, True


def ensure_channel(project_id: int, name: str, now: datetime) -> int:
    found = db.session.execute(
        select(CHANNEL.c.id).where(CHANNEL.c.project_id == project_id, CHANNEL.c.name == name)
    ).scalar()
    if found is not None:
        return found
    stmt = (
        dialect_insert(CHANNEL)
        .values(project_id=project_id, name=name, created_at=now)
        .on_conflict_do_nothing()
        .returning(CHANNEL.c.id)
    )
    new_id = db.session.execute(stmt).scalar()
    if new_id is None:
        raise RaceLost()
    return new_id


def update_conversation(conversation_id: int, values: dict[str, Any], now: datetime) -> None:
    """Set fields and bump `updated_at` (last activity) and `revision` in one UPDATE."""
    db.session.execute(
        update(CONVERSATION)
        .where(CONVERSATION.c.id == conversation_id)
        .values(**values, updated_at=now, revision=REVISION_BUMP)
    )


# What the replay cache keys a conversation's answers on (webapp.services.replay_cache): every
# write that changes a conversation's rows ends with this UPDATE, so the bump costs no statement.
REVISION_BUMP = CONVERSATION.c.revision + 1

_TOUCH = (
    update(CONVERSATION)
    .where(CONVERSATION.c.id.in_(bindparam("ids", expanding=True)))
    .values(updated_at=bindparam("now"), revision=REVISION_BUMP)
)


def touch_conversations(conversation_ids: Iterable[int], now: datetime) -> None:
    """Last activity is now: one UPDATE, the last statement of a write."""
    ids = sorted(set(conversation_ids))
    if ids:
        db.session.execute(_TOUCH, {"ids": ids, "now": now})


def replace_tool_definitions(conversation_id: int, tools: Sequence[Mapping[str, Any]]) -> None:
    """The conversation's tools become exactly `tools` (two statements)."""
    _check_distinct_names(tools)
    rows = [_tool_definition_row(conversation_id, i, t) for i, t in enumerate(tools)]
    db.session.execute(
        delete(TOOL_DEFINITION).where(TOOL_DEFINITION.c.conversation_id == conversation_id)
    )
    if rows:
        db.session.execute(TOOL_DEFINITION.insert(), rows)


def _check_distinct_names(tools: Sequence[Mapping[str, Any]]) -> None:
    # The unique constraint would refuse the second one; a violation the request causes is a
    # 409 naming the field, never a lost race that clients retry for ever.
    seen: dict[str, int] = {}
    for index, tool in enumerate(tools):
        first = seen.setdefault(tool["name"], index)
        if first != index:
            raise Duplicate(
                f"tools.{index}.name",
                f"tool {tool['name']!r} is defined twice in this request",
                duplicate_of=f"tools.{first}",
            )


def _tool_definition_row(conversation_id: int, index: int, tool: Mapping[str, Any]) -> dict:
    parameters = tool.get("parameters")
    if parameters is not None:
        try:
            compact_json(parameters)
        except ValueError:
            raise Invalid(
                f"tools.{index}.parameters", "NaN and Infinity are not valid JSON values"
            ) from None
        parameters = clean_json(parameters)
    return {
        "conversation_id": conversation_id,
        "name": tool["name"],
        "description": clean_text(tool.get("description")),
        "parameters": parameters,
    }
