"""What the replay's loader made of each stored tool call, kept per worker and reused while the
row reads back the same.

A replay after a write loads the whole conversation again (the answer cache,
``webapp.services.replay_cache``, keeps answers only for the revision they were made at). Of a
10,000-call conversation's load, the database's part is about 37 ms and the Python that turns
each row into the replay's objects (JSON parsed and encoded compactly, times parsed, token counts
looked up) about as much again. A conversation grows by appending: nearly every row a replay
reads was read by the previous one. This memo keys what was made of a row by its id and keeps
the row's values with it, its stamp last (``tool_invocation.stamp``: a random number every write
to the row changes, set by the write paths and, for any other write, by triggers). A load that
finds a conversation here reads each call's id and stamp only, and the whole of the rows whose
stamp moved or that the memo does not hold (``queries.histories._changed_rows``); a load without
it compares the rows it read whole, value for value. So it needs no invalidation: a row changed by
any path (an ingestion update, the token pass, hand-written SQL) gets a new stamp and is made
again, a row id reused by SQLite after a delete comes with a new stamp, and a row without one
(stored before the column existed) is read whole every time. Rows whose count the token pass
has still to store are read whole every time too (their count is made on the fly).

Reused objects are shared between requests and threads: the replay library never changes its
input (``History`` and its rows are frozen; nothing writes into an argument dict).

The loader (``queries.histories.load_history``, a read) takes the memo as an argument, as
anything with the two methods of its ``CallRowMemo``; ``services.replay_answer.load`` hands it
this worker's. What it keeps per row is the loader's ``Made``.

Bounded per worker by ``REPLAY_CACHE_MB``, on an estimate of what it holds
(``histories.entry_bytes``: the texts, the parsed arguments and a fixed overhead per row); the
least recently loaded conversations go first; 0 turns it off.
"""

from __future__ import annotations

from flask import Flask, current_app

from ..queries.histories import Made
from .sized_lru import SizedLRU, budget_bytes


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
