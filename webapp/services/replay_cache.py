"""A per-worker cache of replay answers: the encoded bytes of the export document, reused while
nothing they depend on has changed.

A replay's answer (made by ``services.replay_answer``) is a function of (see docs/replay.md,
"The answer cache"):

* the conversation's stored rows: its messages, tool calls, service calls and tool
  definitions, and the token counts stored with them. Every write that changes any of them ends
  with the UPDATE of the conversation row that sets ``updated_at``, which also bumps
  ``conversation.revision`` (``webapp.ingest.conversations``); a deleted conversation bumps
  ``replay_state.version`` by trigger (SQLite may give its row id to the next one). The token
  pass only fills counts that are NULL, so an answer is kept only when no count is NULL;
* the conversation's own fields and the channel's and project's settings the replay reads
  (title, channel name, system prompt, freshness window): the ``ConversationRecord`` the request
  reads anyway, compared whole;
* the request's options (the parsed ``ReplayQuery``) and the answer's shape (JSON or download);
* the clock, only with ``as_of=now``: the answer then carries ``now`` twice (``as_of`` and
  ``stats.as_of``), which is spliced into the cached bytes, and every decision that compares a
  stored time with ``as_of`` (a row created later does not exist, a run still going is in
  progress, a result older than the window is stale) keeps its outcome until the next stored
  time or freshness deadline after the moment the answer was made: the entry expires there. A
  stale result's diagnostic carries its age, which changes with every microsecond: the ages too
  are cut out of the kept bytes and written in at each request (``cut_at_now``, ``render``).

An entry is used only when the conversation's revision, the replay state's version and the
record are those it was made with, read by the request (``queries.conversations.read_state``:
one single-row statement besides the record's). A miss reads them again after loading the rows
and keeps the answer only if they did not move meanwhile (PostgreSQL reads each statement at
its own moment: :func:`put`).

The cache is filled only by replays, bounded by ``REPLAY_CACHE_MB`` per worker (least recently
used entries go first); 0 turns it off.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any, Literal

from flask import Flask, current_app

from ..queries.conversations import State, read_state
from ..queries.records import ConversationRecord
from ..replay.build import age_text, stale_message
from ..replay.export import BuiltReplay
from ..replay.history import History
from .sized_lru import SizedLRU, budget_bytes

# What a cached answer says of "now": ("as_of", None) the time itself; ("age", t) a stale
# result's age in seconds, now - t, as a JSON number; ("age_text", t) the same age as its
# diagnostic's message spells it.
Slot = tuple[Literal["as_of", "age", "age_text"], datetime | None]
# An answer's body as the chunks it is sent in (a WSGI body iterable): a cached answer's pieces
# with what it says of "now" between them, sent without being joined into a copy first.
Body = tuple[bytes, ...]
# At most this many slots (as_of's two, a few stale ages), the pieces are sent as they are;
# more, and they are joined: a socket write per piece would cost more than the copy.
MAX_SENT_SLOTS = 8
# A variant's encoder: the export document (and the replay it came from) to the bytes the
# faces send (``services.replay_answer``).
Encoder = Callable[[dict[str, Any], BuiltReplay], bytes]
# An answer's bytes cut where it says something of "now", and what goes between the pieces.
Cut = tuple[tuple[bytes, ...], tuple[Slot, ...]]


@dataclass(frozen=True, slots=True)
class Entry:
    state: State
    record: ConversationRecord
    # The answer's bytes, cut where it says something of "now" when as_of is "now" (one piece
    # otherwise); slots[i] is what goes between pieces[i] and pieces[i + 1].
    pieces: tuple[bytes, ...]
    slots: tuple[Slot, ...]
    # as_of=now: the answer holds for now in [made_at, expires) (expires None: no deadline).
    made_at: datetime | None
    expires: datetime | None

    @property
    def size(self) -> int:
        return sum(len(p) for p in self.pieces)

    def body(self, now: datetime) -> Body:
        return render(self.pieces, self.slots, now)

    def holds_at(self, now: datetime) -> bool:
        if self.made_at is None:
            return True
        return self.made_at <= now and (self.expires is None or now < self.expires)


class ReplayCache(SizedLRU[tuple[Any, ...], Entry]):
    """Encoded answers by (conversation row id, variant, options), least recently used out
    first once over ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.hits = 0
        self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def get(
        self, key: tuple[Any, ...], state: State, record: ConversationRecord, now: datetime
    ) -> Body | None:
        def holds(entry: Entry) -> bool:
            return entry.state == state and entry.record == record and entry.holds_at(now)

        with self._lock:
            entry = self._lookup(key, holds)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
        return entry.body(now)

    def put(self, key: tuple[Any, ...], entry: Entry) -> None:
        self.store(key, entry, entry.size)


def get_cache(app: Flask | None = None) -> ReplayCache:
    """This process's cache for ``app`` (made on first use, so each gunicorn worker has its
    own, empty until it answers a replay)."""
    app = app or current_app._get_current_object()  # type: ignore[attr-defined]
    cache = app.extensions.get("replay_cache")
    if cache is None:
        cache = app.extensions["replay_cache"] = ReplayCache(budget_bytes(app))
    return cache


def put(
    cache: ReplayCache,
    key: tuple[Any, ...],
    state: State | None,
    conversation: ConversationRecord,
    cut: Cut,
    made_at: datetime | None,
    expires: datetime | None,
) -> None:
    """Keep an answer made from rows read at ``state`` (``made_at``, ``expires``: see
    :class:`Entry`), only if no write landed while the rows were read (each PostgreSQL
    statement reads at its own moment; the revision moves with every write that changes
    them)."""
    if state is None or read_state(conversation.id) != state:
        return
    cache.put(key, Entry(state, conversation, *cut, made_at, expires))


def cut_at_now(
    document: dict[str, Any], built: BuiltReplay, encode: Encoder, now: datetime
) -> Cut | None:
    """The answer's bytes cut where it says something of "now": ``as_of`` and ``stats.as_of``,
    and each stale result's age (its diagnostic's ``detail.age_seconds`` and message). The
    document is encoded with random markers there instead (and put back as it was). None (the
    answer is not kept) if a marker is not found exactly where it was put, or a stale
    diagnostic is not the one the replay makes for that call at ``now``."""
    prefix = "now-" + secrets.token_hex(16)
    slots: dict[str, Slot] = {f"{prefix}a0": ("as_of", None)}
    saved = document["as_of"], document["stats"]["as_of"]
    document["as_of"] = document["stats"]["as_of"] = f"{prefix}a0"
    marked: list[tuple[dict[str, Any], str, float]] = []
    try:
        if not _mark_ages(document, built, now, prefix, slots, marked):
            return None
        body = encode(document, built)
    finally:
        document["as_of"], document["stats"]["as_of"] = saved
        for diagnostic, reason, age in marked:
            diagnostic["reason"], diagnostic["detail"]["age_seconds"] = reason, age
    return _cut(body, prefix, slots)


def _mark_ages(
    document: dict[str, Any],
    built: BuiltReplay,
    now: datetime,
    prefix: str,
    slots: dict[str, Slot],
    marked: list[tuple[dict[str, Any], str, float]],
) -> bool:
    """Put markers where each stale diagnostic says its result's age, noting in ``marked`` what
    was there (False: a diagnostic is not what the replay makes at ``now``: not kept)."""
    stale = [d for d in document["diagnostics"] if d["kind"] == "stale"]
    if not stale:
        return True
    calls = {c.row_id: c for m in built.history.messages for c in m.tool_calls}
    for n, diagnostic in enumerate(stale):
        call = calls.get(diagnostic["call_row_id"])
        if call is None:
            return False
        detail, reason = diagnostic["detail"], diagnostic["reason"]
        since = call.response_created_at or call.created_at
        age, window = (now - since).total_seconds(), detail["freshness_seconds"]
        name, function = call.external_id, call.function_name
        if detail["age_seconds"] != age or reason != stale_message(
            name, function, age_text(age), window
        ):
            return False
        number, text = f"{prefix}f{n}", f"{prefix}t{n}"
        slots[number], slots[text] = ("age", since), ("age_text", since)
        marked.append((diagnostic, reason, age))
        detail["age_seconds"] = number
        diagnostic["reason"] = stale_message(name, function, text, window)
    return True


def _cut(body: bytes, prefix: str, slots: dict[str, Slot]) -> Cut | None:
    """``body`` split at its markers: a number or ``as_of`` marker is a whole JSON string (its
    quotes go with it; inside a longer string a quote would be escaped), an age's text marker
    sits inside the message. Each marker must be found as many times as it was put (``as_of``
    twice, the others once), and nowhere else. Each byte is copied once (an 11 MB answer was
    copied three times here: 20 ms of a cold replay)."""
    marker = prefix.encode("ascii")
    pieces: list[bytes] = []
    order: list[Slot] = []
    seen: dict[str, int] = {}
    start = 0  # where the piece being cut begins
    at = body.find(marker)
    while at >= 0:
        end = number = at + len(marker) + 1  # past the marker's letter
        while end < len(body) and 48 <= body[end] <= 57:  # the marker's number
            end += 1
        name = body[at:end].decode("ascii", "replace")
        slot = slots.get(name)
        if slot is None or end == number:
            return None
        if slot[0] != "age_text":  # a whole JSON string: take its quotes off both sides
            if not (at > start and body[at - 1] == 34 and body[end : end + 1] == b'"'):
                return None
            at, end = at - 1, end + 1
        pieces.append(body[start:at])
        seen[name] = seen.get(name, 0) + 1
        order.append(slot)
        start = end
        at = body.find(marker, start)
    pieces.append(body[start:])
    expected = {name: 2 if kind == "as_of" else 1 for name, (kind, _t) in slots.items()}
    return (tuple(pieces), tuple(order)) if seen == expected else None


def render(pieces: tuple[bytes, ...], slots: tuple[Slot, ...], now: datetime) -> Body:
    """A cached answer's body at ``now``: its pieces with what it says of ``now`` between
    them, as the replay and the encoders would say it (``as_of`` by ``isoformat``, an age as
    ``json`` spells a float, its ``repr``, the message's age by ``age_text``). The pieces are
    not copied (the answer is in memory once, in the cache), unless there are more than
    ``MAX_SENT_SLOTS`` slots."""
    if not slots:
        return pieces
    parts = [pieces[0]]
    as_of = as_of_json(now)
    for (kind, since), piece in zip(slots, pieces[1:], strict=True):
        if kind == "as_of":
            parts.append(as_of)
        else:
            assert since is not None
            age = (now - since).total_seconds()
            word = repr(age) if kind == "age" else age_text(age)
            parts.append(word.encode("ascii"))
        parts.append(piece)
    if len(slots) > MAX_SENT_SLOTS:
        return (b"".join(parts),)
    return tuple(parts)


def as_of_json(now: datetime) -> bytes:
    """``now`` as the answer spells ``as_of`` (``datetime.isoformat``, a JSON string: ASCII,
    nothing to escape)."""
    return b'"' + now.isoformat().encode("ascii") + b'"'


def _floor_seconds(seconds: float) -> timedelta:
    """``seconds`` as a timedelta rounded down to the microsecond (timedelta rounds to the
    nearest): a deadline never later than the exact one."""
    return timedelta(microseconds=int(Fraction(seconds) * 1_000_000 // 1))


def next_change(history: History, window: float | None, now: datetime) -> datetime | None:
    """The first moment at which a replay ``as_of`` the clock could decide otherwise than at
    ``now`` (an entry holds for now <= clock < that moment): the next stored time after ``now``
    (a row created, a response, a service call; the replay compares each with ``as_of`` as
    "created after it") or the next freshness deadline from ``now`` on (a result is stale once
    ``as_of`` - its time > the window: up to the deadline, rounded down to the microsecond, it is
    not). Every time of the history counts, whether the replay looked at it or not: an earlier
    deadline only makes the entry expire sooner. None: no such moment."""
    moments: list[datetime] = []
    deadlines: list[datetime] = []
    add = moments.append
    step = _floor_seconds(window) if window is not None else None
    for m in history.messages:
        add(m.created_at)
        for c in m.tool_calls:
            add(c.created_at)
            rc = c.response_created_at
            if rc is not None:
                add(rc)
            if step is not None:
                with suppress(OverflowError):  # beyond year 9999: never reached
                    deadlines.append((rc or c.created_at) + step)
        for s in m.service_calls:
            if s.created_at is not None:
                add(s.created_at)
    # "Created after as_of" keeps its outcome from the stored time on, so a time equal to now
    # changes nothing later; "stale" turns true right after its deadline, so a deadline equal
    # to now ends the answer at once (it is then not kept).
    later = [t for t in moments if t > now]
    later += [d for d in deadlines if d >= now]
    return min(later, default=None)
