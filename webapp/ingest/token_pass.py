"""The token pass: counts the tokens of stored tool calls and message contents after their
request was answered.

Tokenizing was about a third of a write's CPU, and the tokenizer is ~80 MB of memory. A write
therefore stores its calls with `arguments_tokens` / `response_tokens` NULL and its messages
with `content_tokens` NULL, and this pass counts them later, in bounded batches, in a process of
its own (`webapp.token_process`): the web workers never load the tokenizer to ingest. The
pending work *is* those NULLs in the database, so nothing is lost when a process dies mid-pass:
the next pass (another server's, a restarted one's, or `toolscope tokens count`) finds the
same rows still NULL.

A row is pending while it has arguments without `arguments_tokens` or a response without
`response_tokens` (a response that arrives after its call makes its row pending again). Counts
are written with `COALESCE(column, :count)`: a row counted meanwhile by another pass keeps the
count it has, so nothing is ever counted twice into the database, and two passes racing only
waste CPU. A response can only go from none to one text (a different one is a conflict), so a
count made from the text read is the count of the text stored.

Tokens are counted for the model the row's message has when the pass reads it, as the replay
counts a text it has no stored count for (`webapp.queries.histories` falls back to exactly this
count, so an export is the same before and after the pass).

A message is pending while it has a non-empty content without `content_tokens`; its count is
made for the message's model (as ingestion counted it before) and written with COALESCE too,
and only if the row still has that content and model (an in_progress message may change).

Under gunicorn the pass runs in one process per server that the master starts and watches
(`webapp.token_process`, from `webapp.gunicorn_conf`); `toolscope serve` runs `TokenPass` in a
thread. Both tokenize at the lowest CPU priority (`webapp.background`: the writes stay at the
process's, so the pass is never starved holding SQLite's write lock), and a file lock per
database lets one pass per machine do the work while another waits to take over. It follows
the newest rows every TOKEN_PASS_SECONDS and goes over the whole table again every
FULL_SCAN_SECONDS (rows whose response came later, ids committed out of order on PostgreSQL, a
previous crash).

During a burst of writes the pass yields (`Arrivals`). Its CPU (tokenizing is ~30% of what a
call costs the server) and, on SQLite, its write transactions (the one write lock the web
workers queue for) would otherwise come out of the burst's throughput. Each round it reads the
newest id of each table (the end of the primary key index, nearly free); while rows arrive
faster than BURST_ROWS_PER_SECOND it counts only the rows that have waited
TOKEN_PASS_MAX_LAG_SECONDS, so counts lag by at most about that (plus a round) as long as the
pass can count as fast as rows arrive, and the rest is counted when the burst ends. The full
scan waits for the end of a burst too, but not longer than the same bound.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from sqlalchemy import BigInteger, Integer, String, and_, bindparam, func, or_, select, update

from ..background import LowPriorityLane, direct
from ..db import MAX_BIGINT, begin_write, db
from ..sql import MESSAGE, TOOL, new_stamp
from . import attribution, rollups
from .values import compact_json, count_tokens

log = logging.getLogger(__name__)

BATCH_ROWS = 500
FULL_SCAN_SECONDS = 60.0
# Rows (calls and messages) stored per second above which the pass yields to the writes. One
# agent stores a few calls a second; a fleet replaying its backlog, or the bench, thousands.
BURST_ROWS_PER_SECOND = 1000.0
# The arrival rate is measured over at least this long (the pass samples once a round).
BURST_WINDOW_SECONDS = 1.0
# The default of TOOLSCOPE_TOKEN_PASS_MAX_LAG_SECONDS (webapp.settings).
MAX_LAG_SECONDS = 30.0

# The last id a read may return: unbounded unless a caller says otherwise.
_UPTO = bindparam("upto", MAX_BIGINT, type_=BigInteger)

PENDING = or_(
    and_(TOOL.c.arguments.is_not(None), TOOL.c.arguments_tokens.is_(None)),
    and_(TOOL.c.response.is_not(None), TOOL.c.response_tokens.is_(None)),
)

_PENDING_ROWS = (
    select(
        TOOL.c.id,
        TOOL.c.arguments,
        TOOL.c.response,
        TOOL.c.arguments_tokens,
        TOOL.c.response_tokens,
        MESSAGE.c.model,
    )
    .join(MESSAGE, MESSAGE.c.id == TOOL.c.message_id)
    .where(TOOL.c.id > bindparam("after"), TOOL.c.id <= _UPTO, PENDING)
    .order_by(TOOL.c.id)
    .limit(bindparam("limit"))
)

_SET_COUNTS = (
    update(TOOL)
    .where(TOOL.c.id == bindparam("b_id"))
    .values(
        arguments_tokens=func.coalesce(
            TOOL.c.arguments_tokens, bindparam("b_arguments", type_=Integer)
        ),
        response_tokens=func.coalesce(
            TOOL.c.response_tokens, bindparam("b_response", type_=Integer)
        ),
        token_method=func.coalesce(TOOL.c.token_method, bindparam("b_method", type_=String)),
        # A new stamp, so the replay's loader reads the counts (the stamp trigger would
        # otherwise write the row a second time on SQLite).
        stamp=bindparam("b_stamp", type_=BigInteger),
    )
)


MESSAGE_PENDING = and_(
    MESSAGE.c.content.is_not(None), MESSAGE.c.content != "", MESSAGE.c.content_tokens.is_(None)
)

_PENDING_MESSAGES = (
    select(MESSAGE.c.id, MESSAGE.c.content, MESSAGE.c.model)
    .where(MESSAGE.c.id > bindparam("after"), MESSAGE.c.id <= _UPTO, MESSAGE_PENDING)
    .order_by(MESSAGE.c.id)
    .limit(bindparam("limit"))
)

# An in_progress message's content and model may change while the pass counts it (the write
# sets content_tokens back to NULL): the count is stored only if the row still has the text and
# model it was made from.
_SET_CONTENT_TOKENS = (
    update(MESSAGE)
    .where(
        MESSAGE.c.id == bindparam("b_id"),
        MESSAGE.c.content == bindparam("b_content"),
        MESSAGE.c.model.is_not_distinct_from(bindparam("b_model")),
    )
    .values(
        content_tokens=func.coalesce(MESSAGE.c.content_tokens, bindparam("b_tokens", type_=Integer))
    )
)


def call_counts(
    arguments: Any, response: str | None, model: str | None
) -> tuple[int | None, int | None, str | None]:
    """(arguments tokens, response tokens, method) of one call, as ingestion counts them."""
    arguments_tokens = response_tokens = method = None
    if arguments is not None:
        count = count_tokens(compact_json(arguments), model)
        arguments_tokens, method = count.tokens, count.method
    if response is not None:
        count = count_tokens(response, model)
        response_tokens, method = count.tokens, method or count.method
    return arguments_tokens, response_tokens, method


def _params(row: Any) -> dict[str, Any]:
    arguments = row.arguments if row.arguments_tokens is None else None
    response = row.response if row.response_tokens is None else None
    a, r, method = call_counts(arguments, response, row.model)
    if a is None and row.arguments_tokens is None and row.response is None:
        # Arguments stored as JSON null (SQL sees a value, Python None): nothing to count;
        # 0 takes the row out of the pending set.
        a = 0
    return {
        "b_id": row.id,
        "b_arguments": a,
        "b_response": r,
        "b_method": method,
        "b_stamp": new_stamp(),
    }


def _message_params(row: Any) -> dict[str, Any]:
    tokens = count_tokens(row.content, row.model).tokens
    return {"b_id": row.id, "b_content": row.content, "b_model": row.model, "b_tokens": tokens}


@dataclass(frozen=True)
class _Kind:
    """What the pass counts: which rows are pending, how to count one, how to store it."""

    rows: Any
    params: Callable[[Any], dict[str, Any]]
    store: Any
    id: Any  # the table's id column


CALLS = _Kind(_PENDING_ROWS, _params, _SET_COUNTS, TOOL.c.id)
MESSAGES = _Kind(_PENDING_MESSAGES, _message_params, _SET_CONTENT_TOKENS, MESSAGE.c.id)
KINDS = (CALLS, MESSAGES)

_NEWEST_IDS = select(*(select(func.max(kind.id)).scalar_subquery() for kind in KINDS))


def count_batch(
    after: int = 0,
    limit: int = BATCH_ROWS,
    kind: _Kind = CALLS,
    upto: int = MAX_BIGINT,
    tokenize_in: Callable[..., Any] = direct,
) -> tuple[int, int | None]:
    """Count the first `limit` pending rows (tool calls, or messages) with an id above `after`
    and at most `upto`.

    Tokenizes outside any transaction (through `tokenize_in`: the pass's thread hands it to
    its lane at the lowest priority), then writes the counts in one short write transaction
    at the caller's priority. Returns (rows counted, last id seen or None when there was
    nothing to count)."""
    rows = db.session.execute(kind.rows, {"after": after, "limit": limit, "upto": upto}).all()
    db.session.commit()  # the read ends before tokenizing: no snapshot held, no lock taken
    if not rows:
        return 0, None
    params = tokenize_in(_all_params, kind, rows)
    try:
        begin_write()
        if kind is CALLS:  # the roll-ups' token sums, for the rows that get a count now
            rollups.count_tokens(
                {p["b_id"]: p["b_response"] for p in params if p["b_response"] is not None}
            )
        counted = [p["b_id"] for p in params]  # stored attributions computed without them
        attribution.mark_counted(*((counted, ()) if kind is CALLS else ((), counted)))
        db.session.execute(kind.store, params, execution_options={"synchronize_session": False})
        db.session.commit()
    except BaseException:
        db.session.rollback()
        raise
    return len(rows), rows[-1].id


def _all_params(kind: _Kind, rows: list[Any]) -> list[dict[str, Any]]:
    return [kind.params(row) for row in rows]


def count_pending(limit: int = BATCH_ROWS, kind: _Kind = CALLS) -> int:
    """Count every pending row of `kind`, from the first; the number of rows counted."""
    total, after = 0, 0
    while True:
        counted, last = count_batch(after, limit, kind)
        total += counted
        if last is None or counted < limit:
            return total
        after = last


def newest_ids() -> tuple[int, ...]:
    """The largest id of each kind's table (0 when empty): the end of each primary key."""
    ids = db.session.execute(_NEWEST_IDS).one()
    db.session.commit()
    return tuple(i or 0 for i in ids)


def pending_rows() -> int:
    """How many tool calls wait for the pass (for the CLI and the tests)."""
    return db.session.execute(select(func.count()).select_from(TOOL).where(PENDING)).scalar_one()


def pending_messages() -> int:
    """How many message contents wait for the pass."""
    query = select(func.count()).select_from(MESSAGE).where(MESSAGE_PENDING)
    return db.session.execute(query).scalar_one()


class Arrivals:
    """The newest id of each kind, sampled once a round: how fast rows arrive, and up to which
    ids rows have waited `max_lag` seconds.

    A row with an id above a sample's was not stored yet when the sample was taken, and one at
    or below it was: the samples date the rows to within a round, without a timestamp column.
    The oldest sample kept is the newest one at least `max_lag` old, or the first. Rows stored
    before the first sample (before this pass started) are of unknown age: they count as stored
    at that sample, so a pass started in the middle of a burst (a server starting under load, a
    restart after a crash) yields too, and counts them `max_lag` after it started."""

    def __init__(self, max_lag: float, window: float = BURST_WINDOW_SECONDS):
        self.max_lag = max_lag
        self.window = window
        self._samples: deque[tuple[float, tuple[int, ...]]] = deque()

    def add(self, now: float, newest: tuple[int, ...]) -> None:
        samples = self._samples
        samples.append((now, newest))
        while len(samples) > 1 and samples[1][0] <= now - self.max_lag:
            samples.popleft()

    def measured(self) -> bool:
        """Whether there are two samples to measure a rate from."""
        return len(self._samples) > 1

    def rate(self) -> float:
        """Rows stored per second over the last `window` seconds (or since the first sample)."""
        now, newest = self._samples[-1]
        start, before = self._samples[0]
        for then, ids in reversed(self._samples):
            if then <= now - self.window:
                start, before = then, ids
                break
        if now <= start:
            return 0.0
        return sum(n - b for n, b in zip(newest, before, strict=True)) / (now - start)

    def overdue(self) -> tuple[int, ...]:
        """Per kind, the id at or below which every row has waited `max_lag` (0: none has)."""
        then, ids = self._samples[0]
        if then > self._samples[-1][0] - self.max_lag:
            return (0,) * len(ids)
        return ids


@dataclass
class TokenPass:
    """The pass as a daemon thread: `start(app)`, `stop()` (in `toolscope serve`, and in the
    token pass process that gunicorn's master starts, `webapp.token_process`). `step()` is one
    round, in an app context (the thread's loop; the tests call it with a fake `clock`).

    `max_lag_seconds` 0 never yields to a burst: every round counts all that is pending."""

    interval: float
    lock_path: str
    full_scan_seconds: float = FULL_SCAN_SECONDS
    batch_rows: int = BATCH_ROWS
    max_lag_seconds: float = MAX_LAG_SECONDS
    burst_rows_per_second: float = BURST_ROWS_PER_SECOND
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_file: IO[bytes] | None = None
        self._arrivals = Arrivals(self.max_lag_seconds)
        # Where each kind's following of the newest rows stands: every pending row at or below
        # it was counted (rows that became pending again later wait for the full scan).
        self._after = [0] * len(KINDS)
        # None: the first round of a new pass is a full scan (crash recovery).
        self._full_scan_due: float | None = None
        self.yielding = False  # the last round left rows pending because of a burst
        # Where the tokenizing runs: here in the tests' `step()`, in a lane at the lowest
        # priority once started (the writes stay at the thread's: `webapp.background`).
        self._lane: LowPriorityLane | None = None

    @classmethod
    def for_database(
        cls, database_url: str, interval: float, max_lag_seconds: float = MAX_LAG_SECONDS
    ) -> TokenPass:
        digest = hashlib.sha256(database_url.encode()).hexdigest()[:16]
        lock_path = os.path.join(tempfile.gettempdir(), f"toolscope-tokens-{digest}.lock")
        return cls(interval, lock_path, max_lag_seconds=max_lag_seconds)

    @classmethod
    def for_app(cls, app: Any) -> TokenPass:
        """The pass of the app's database with the app's settings."""
        config = app.config
        return cls.for_database(
            config["DATABASE_URL"],
            config["TOKEN_PASS_SECONDS"],
            config.get("TOKEN_PASS_MAX_LAG_SECONDS", MAX_LAG_SECONDS),
        )

    def start(self, app: Any) -> None:
        # The tokenizing at the lowest CPU priority, so requests come first and the pass takes
        # the CPU they leave (tiktoken releases the GIL while it encodes); the thread that takes
        # the write lock keeps the process's priority, so it is never starved holding it.
        self._lane = LowPriorityLane("toolscope-token-pass-tokenizer")
        self._thread = threading.Thread(
            target=self._run, args=(app,), name="toolscope-token-pass", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._lane is not None:
            self._lane.close()
        if self._lock_file is not None:
            self._lock_file.close()  # releases the lock for another pass

    def _has_lock(self) -> bool:
        if self._lock_file is not None:
            return True
        handle = open(self.lock_path, "ab")  # noqa: SIM115 - kept open while the lock is held
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return False
        self._lock_file = handle
        return True

    def step(self) -> bool:
        """One round: count a batch of each kind, as far as a burst lets it. True when more is
        pending that this round may count right away (the loop then waits no interval)."""
        now = self.clock()
        newest = newest_ids()
        self._arrivals.add(now, newest)
        if self.max_lag_seconds > 0 and not self._arrivals.measured():
            # A server starting in the middle of a burst: load no tokenizer, take no write
            # lock, before a second sample tells whether rows are pouring in.
            return False
        burst = self.max_lag_seconds > 0 and self._arrivals.rate() >= self.burst_rows_per_second
        due = self._full_scan_due
        if due is None or (now >= due and (not burst or now - due >= self.max_lag_seconds)):
            self._after = [0] * len(KINDS)
            self._full_scan_due = now + self.full_scan_seconds
        # In a burst only the rows that have waited max_lag; otherwise all stored by now.
        bound = self._arrivals.overdue() if burst else newest
        more = False
        tokenize_in = direct if self._lane is None else self._lane.run
        for n, kind in enumerate(KINDS):
            if self._after[n] >= bound[n]:
                continue  # nothing stored (or overdue) beyond where the pass stands
            counted, last = count_batch(
                self._after[n], self.batch_rows, kind, bound[n], tokenize_in
            )
            if counted < self.batch_rows:
                self._after[n] = bound[n]  # every pending row up to the bound was read
            else:
                assert last is not None
                self._after[n] = last
                more = True
        self.yielding = burst and any(a < b for a, b in zip(self._after, newest, strict=True))
        return more

    def _run(self, app: Any) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            wait = self.interval
            if not self._has_lock():
                continue
            try:
                with app.app_context():
                    try:
                        if self.step():
                            wait = 0.0  # more pending: keep going
                    finally:
                        db.session.remove()
            except Exception:  # the database may be busy or gone: try again next time
                log.warning("token pass failed; retrying", exc_info=True)
