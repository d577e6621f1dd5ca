"""The write path: conversations, messages, tool calls and usage, in bulk, idempotent, atomic.

Callers (the API views) prepare a batch first (`prepare_messages`, `prepare_message_tools`:
redaction and measuring, no database writes), then hand a `transaction.Write` whose store step
calls the `store_*` functions to `transaction.run_write`, which opens the write transaction with
`db.begin_write()`, runs it and commits. On SQLite only one writer holds the lock at a time, so
the CPU work stays outside it. The `store_*` functions do not commit, so a failure anywhere
leaves nothing behind.

Speed: a request runs a constant number of statements whatever its size. Existing rows for all
keys of a batch are loaded in one query, the differences are worked out in Python, and the
writes are one multi-row INSERT and at most one executemany UPDATE per table.

Idempotency (clients retry after 5xx and dropped connections):
- a tool call is keyed by (message, round_index, sequence_index); the same call again is a
  no-op, a later post may add the response, anything else that differs is a `Conflict` (409);
- a message is keyed by (project, external id); the same again is a no-op, a placeholder made
  by the MessageTool API is filled in and attached, an `in_progress` assistant message may be
  updated; anything else that differs is a `Conflict`.

Concurrency: every INSERT is `ON CONFLICT DO NOTHING ... RETURNING`. If a concurrent writer
inserted one of our keys between our read and our insert, fewer rows come back and `RaceLost`
is raised; `run_write` rolls back and runs the store step once more, when it sees that row. On
PostgreSQL existing messages are read `FOR UPDATE`, so writers of one message queue up; the
conversation row is always written last, so those locks are always taken in the same order.
"""

from .calls import CallDraft
from .conversations import (
    ensure_channel,
    ensure_conversation,
    replace_tool_definitions,
    touch_conversations,
    update_conversation,
)
from .deletes import delete_conversation
from .errors import Conflict, Invalid, RaceLost
from .messages import MessageDraft
from .usage import UsageDraft
from .values import clean_text
from .writes import (
    PreparedMessage,
    PreparedToolBatch,
    WriteContext,
    load_rules,
    prepare_message_tools,
    prepare_messages,
    store_message_tools,
    store_messages,
)

__all__ = [
    "CallDraft",
    "Conflict",
    "Invalid",
    "MessageDraft",
    "PreparedMessage",
    "PreparedToolBatch",
    "RaceLost",
    "UsageDraft",
    "WriteContext",
    "clean_text",
    "delete_conversation",
    "ensure_channel",
    "ensure_conversation",
    "load_rules",
    "prepare_message_tools",
    "prepare_messages",
    "replace_tool_definitions",
    "store_message_tools",
    "store_messages",
    "touch_conversations",
    "update_conversation",
]
