"""The write transaction: every write is a prepare step, then a `Write` run by `run_write`.

A prepare step (an API view declared `prepares=True`, or `ingest.otlp.receiver`) checks,
redacts and works out what to store, reading what it needs in a short read transaction, and
returns a `Write`: its database step, a named function, with the prepared values it is called
with. The caller ends the read, and `run_write` opens the write transaction with
`begin_write()` (SQLite's write lock up front), runs the step and commits. So on SQLite, where
one writer at a time holds the lock, the CPU work of one request runs while another writes.

A lost insert race (`RaceLost`, or a unique violation, deadlock, serialization failure or
foreign key violation on PostgreSQL) is rolled back and the step run once more, when it sees the
other writer's rows (or that a row it referred to was deleted meanwhile, and creates it again); a
database that does not let the write in in time (SQLite still locked after its busy timeout, a
PostgreSQL lock_timeout) is a 503 `busy`, which clients retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from ..db import begin_write, db
from ..errors import ApiError
from .errors import RaceLost

T = TypeVar("T")

log = logging.getLogger(__name__)

# PostgreSQL SQLSTATEs worth one more try: the other transaction has finished by then. A
# foreign key violation (23503) can only be a race: a store step refers to rows it read or made
# in its own transaction, so the row was deleted by a concurrent delete that committed since
# (writers hold their conversation against that, ingest.conversations; this is the backstop).
_RETRY_SQLSTATES = {"40001", "40P01", "23505", "23503"}
# PostgreSQL: lock_timeout (PG_LOCK_TIMEOUT_MS) or statement_timeout ran out.
_BUSY_SQLSTATES = {"55P03", "57014"}


@dataclass(frozen=True)
class Write(Generic[T]):
    """A write's database step: `store(*args, **kwargs)`, run inside the write transaction
    (perhaps twice, so it must not change what it is given). `store` is a named function: it
    runs only the SQL (and reads the answer back); the prepared values are its arguments."""

    store: Callable[..., T]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.store.__module__}.{self.store.__qualname__}"

    def run(self) -> T:
        return self.store(*self.args, **self.kwargs)


class StaleCache(Exception):
    """`run_write`'s `check` found what the prepare step relied on out of date: the write was
    rolled back before its step ran; the caller reads again and prepares again."""


def run_write(write: Write[T], *, check: Callable[[], bool] | None = None) -> T:
    """Run `write` in the write transaction and commit; once more after a lost race.

    `check`, if given, runs first thing in the transaction (the API's key cache,
    `webapp.auth.check_api_cache`): False rolls back and raises `StaleCache`. A busy database,
    or a race lost twice, is an `ApiError` 503 `busy`. The caller ends its read transaction
    before (`begin_write` must open the transaction)."""
    for attempt in (1, 2):
        try:
            begin_write()
            if check is not None and not check():
                raise StaleCache()  # rolled back below
            result = write.run()
            db.session.commit()
            return result
        except (RaceLost, DBAPIError) as exc:
            db.session.rollback()
            if _busy_database(exc):
                raise busy() from exc
            if not _retryable(exc):
                raise
            if attempt == 2:
                log.warning("write race lost twice (%s): %s", write.name, exc)
                raise busy() from exc
        except BaseException:
            db.session.rollback()
            raise
    raise AssertionError("unreachable")


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, RaceLost):
        return True
    if isinstance(exc, DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if sqlstate in _RETRY_SQLSTATES:
            return True
        # SQLite: a unique violation can only be a race (BEGIN IMMEDIATE makes it very rare).
        return isinstance(exc, IntegrityError) and "UNIQUE" in str(exc.orig)
    return False


def _busy_database(exc: Exception) -> bool:
    """The database did not let this write in in time: SQLite's lock after its busy timeout,
    or a PostgreSQL row lock after lock_timeout. Answered 503 with Retry-After."""
    if isinstance(exc, DBAPIError) and getattr(exc.orig, "sqlstate", None) in _BUSY_SQLSTATES:
        return True
    return isinstance(exc, OperationalError) and "database is locked" in str(exc.orig)


def busy() -> ApiError:
    """The 503 a write answers when the database (or the worker's pool) is busy."""
    return ApiError(
        503, "the database is busy with concurrent writes; retry the request", code="busy"
    )
