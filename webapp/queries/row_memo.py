"""What the replay's loader made of each stored tool call, kept per worker and reused while the
row reads back the same.

A replay after a write loads the whole conversation again (the answer cache,
``webapp.queries.replay_cache``, keeps answers only for the revision they were made at). Of a
10,000-call conversation's load, the database's part is about 37 ms and the Python that turns
each row into the replay's objects (JSON parsed and encoded compactly, times parsed, token counts
looked up) about as much again. A conversation grows by appending: nearly every row a replay
reads was read by the previous one. This memo keys what was made of a row by its id and keeps
the row's values with it, its stamp last (``tool_invocation.stamp``: a random number every write
to the row changes, set by the write paths and, for any other write, by triggers). A load that
finds a conversation here reads each call's id and stamp only, and the whole of the rows whose
stamp moved or that the memo does not hold (``histories._changed_rows``); a load without it
compares the rows it read whole, value for value. So it needs no invalidation: a row changed by
any path (an ingestion update, the token pass, hand-written SQL) gets a new stamp and is made
again, a row id reused by SQLite after a delete comes with a new stamp, and a row without one
(stored before the column existed) is read whole every time. Rows whose count the token pass
has still to store are read whole every time too (their count is made on the fly).

Reused objects are shared between requests and threads: the replay library never changes its
input (``History`` and its rows are frozen; nothing writes into an argument dict).

Bounded per worker by ``REPLAY_CACHE_MB``, on an estimate of what it holds (:func:`entry_bytes`:
the texts, the parsed arguments and a fixed overhead per row); the least recently loaded
conversations go first; 0 turns it off.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from flask import Flask, current_app

from ..replay.history import ToolCall
from .sized_lru import SizedLRU, budget_bytes

# Roughly what one memo entry costs beyond its texts: the row's tuple and small values, the
# ToolCall, the argument dict's containers, the dict slot.
ENTRY_OVERHEAD_BYTES = 600


class Made(NamedTuple):
    """What the loader made of one tool call row (``histories._replay_calls``)."""

    row: tuple[Any, ...]
    call: ToolCall
    response: str | None  # call.response, one attribute lookup nearer
    # The compact argument text the replay sends, its stored (or counted) token count, and
    # whether it is known to be a JSON object jsonfast reads (LoadedHistory.object_arguments).
    compact: str | None
    arguments_tokens: int | None
    response_tokens: int | None
    known_object: bool
    # A count the token pass will store is still NULL (LoadedHistory.uncounted).
    uncounted: bool
    size: int  # entry_bytes


def entry_bytes(response: str | None, arguments_text: str | None, compact: str | None) -> int:
    """About what keeping one made row holds: the texts, the argument dict parsed from them
    (counted as long as its compact text) and the rest (ENTRY_OVERHEAD_BYTES)."""
    size = ENTRY_OVERHEAD_BYTES + len(response or "") + len(arguments_text or "")
    return size + 2 * len(compact or "")


class RowMemo(SizedLRU[int, dict[int, Made]]):
    """Made rows by conversation row id, then by tool call row id."""

    def rows(self, conversation_id: int) -> dict[int, Made]:
        """The rows made by the last load of the conversation (empty if none is kept). The
        dict is never changed once kept: a load makes a new one (:meth:`keep`)."""
        kept = self.lookup(conversation_id)
        return kept if kept is not None else {}

    def keep(self, conversation_id: int, rows: dict[int, Made], size: int) -> None:
        """The rows of the latest load of a conversation, replacing the previous ones (a row
        deleted since is then gone from the memo too)."""
        self.store(conversation_id, rows, size)


def get_memo(app: Flask | None = None) -> RowMemo | None:
    """This process's memo for ``app`` (made on first use, so each gunicorn worker has its
    own); None when turned off (``REPLAY_CACHE_MB=0``)."""
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    memo = app.extensions.get("row_memo")
    if memo is None:
        memo = app.extensions["row_memo"] = RowMemo(budget_bytes(app))
    return memo if memo.max_bytes > 0 else None
