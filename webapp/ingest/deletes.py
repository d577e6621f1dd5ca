"""Deleting one conversation (the dashboard's button, `DELETE /api/v1/conversations/<cid>`,
`toolscope conversations delete`): its messages, tool calls, usage and tool definitions go by
the foreign keys' cascades (and the calls' search index with them, see webapp/models.py), the
OTLP turns projected into it likewise, and the raw OTLP spans, log records and links of the
traces it was built from are deleted here, unless a trace also feeds another conversation.

On PostgreSQL the conversation row is locked `FOR UPDATE` before anything else: every writer
holds its conversation `FOR KEY SHARE` first (`ingest.conversations.ensure_conversation`, the
OTLP store's `_hold_conversations`), so the delete waits for the writers already in it, then
sees their committed rows (the raw spans of an export that was still being written included),
and writers that come after wait for the delete and find the conversation gone. Taking the
conversation first, as the writers do, also keeps the cascade from deadlocking with them."""

from __future__ import annotations

from sqlalchemy import delete, select

from ..db import db
from ..sql import CONVERSATION
from . import rollups
from .otlp.retention import delete_raw_of


def delete_conversation(project_id: int, conversation_id: int) -> bool:
    """Delete the project's conversation with that row id; False if there is none. Runs in the
    caller's write transaction and does not commit: on an error nothing is written."""
    selected = select(CONVERSATION.c.id).where(
        CONVERSATION.c.id == conversation_id, CONVERSATION.c.project_id == project_id
    )
    if db.session.execute(selected.with_for_update()).first() is None:
        return False  # none, or deleted by a concurrent delete that this one waited for
    delete_raw_of(selected)
    rollups.remove_conversations([conversation_id])
    db.session.execute(
        delete(CONVERSATION).where(
            CONVERSATION.c.id == conversation_id, CONVERSATION.c.project_id == project_id
        )
    )
    return True
