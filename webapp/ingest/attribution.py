"""The token pass's part in keeping the stored tool costs true (services.attribution_store).

A conversation's stored attribution was computed with the token counts it had; where some were
still pending (``pending_counts``), the replay counted those texts itself, perhaps otherwise
than the pass does. When the pass fills a count of such a conversation, this marks its
attribution stale (revision -1), in the pass's write transaction: one UPDATE per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select, update

from ..db import db
from ..models import ConversationAttribution as A
from ..models import Message
from ..models import ToolInvocation as T

__all__ = ["mark_counted"]


def mark_counted(call_ids: Sequence[int] = (), message_ids: Sequence[int] = ()) -> None:
    """The pass is about to store counts of these tool calls and messages."""
    if call_ids:
        conversations = (
            select(Message.conversation_id)
            .join(T, T.message_id == Message.id)
            .where(T.id.in_(call_ids))
        )
    elif message_ids:
        conversations = select(Message.conversation_id).where(Message.id.in_(message_ids))
    else:
        return
    db.session.execute(
        update(A).where(A.pending_counts, A.conversation_id.in_(conversations)).values(revision=-1),
        execution_options={"synchronize_session": False},
    )
