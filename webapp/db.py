"""The SQLAlchemy handle, column types shared by the models, and connection set-up."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime
from typing import Any

import click
from flask import Flask, current_app, has_request_context, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import JSON, DateTime, MetaData, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

from . import paths

# Stable constraint names, so that Alembic migrations name the same thing on every database.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


db = SQLAlchemy(model_class=Base)

# The largest id of an Integer column (PostgreSQL's `integer`) and of a BigInteger one (also
# SQLite's limit). A larger number in a URL or a form must be "not found", not a database error.
MAX_INT = 2**31 - 1
MAX_BIGINT = 2**63 - 1

# JSONB on PostgreSQL (indexable, compact), plain JSON text on SQLite.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    SQLite has no time zones, so values are stored as naive UTC; PostgreSQL stores timestamptz.
    Naive datetimes are refused on the way in, so local time can never sneak into the data.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; Toolscope stores UTC only")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def bind_processor(self, dialect: Any) -> Any:
        """On SQLite, `process_bind_param` and the dialect's DATETIME text in one step: a
        write of OTLP spans binds ~2,500 timestamps per export, inside the write lock, and the
        two steps (a `replace`, then SQLAlchemy's `%`-format of seven fields) were 15% of it
        (py-spy). `isoformat` gives the same text ('YYYY-MM-DD HH:MM:SS.ffffff', the storage
        format of SQLite's DATETIME), so stored values compare as before; a test checks the two
        agree for any datetime."""
        stored_as = getattr(self.impl_instance.dialect_impl(dialect), "_storage_format", None)
        if dialect.name != "sqlite" or stored_as != SQLITE_DATETIME_FORMAT:
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            if value.tzinfo is None:
                raise ValueError("naive datetime given; Toolscope stores UTC only")
            return value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")

        return process


# SQLAlchemy's default storage format of SQLite's DATETIME (sqlalchemy.dialects.sqlite.DATETIME).
SQLITE_DATETIME_FORMAT = (
    "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d.%(microsecond)06d"
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def _configure_sqlite(dbapi_connection: Any, busy_timeout_ms: int) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the dashboard read while an agent writes, and makes commits cheaper.
    cursor.execute("PRAGMA journal_mode=WAL")
    # Writers from several gunicorn workers queue for the lock instead of failing at once.
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    # SQLite ignores foreign keys unless asked, per connection.
    cursor.execute("PRAGMA foreign_keys=ON")
    # In WAL mode NORMAL is still crash-safe for the database; only the last commits may be lost
    # on power failure, which is acceptable for observability data and much faster than FULL.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
    # Take transaction control away from the sqlite3 module so that "begin" below decides how a
    # transaction starts (SQLAlchemy's documented recipe for pysqlite).
    dbapi_connection.isolation_level = None


def _configure_postgresql(dbapi_connection: Any, lock_timeout_ms: int) -> None:
    # A writer waiting for a row lock gives up after this long (SQLSTATE 55P03), and the
    # request is answered 503 with Retry-After: back-pressure instead of an unbounded queue.
    with dbapi_connection.cursor() as cursor:
        cursor.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
    dbapi_connection.commit()


def _begin_sqlite(conn: Any) -> None:
    # A deferred transaction that reads and then writes can fail at once with "database is
    # locked" when another writer got there first; busy_timeout does not help in that case.
    # Writers therefore take the write lock up front (BEGIN IMMEDIATE) and queue politely.
    immediate = conn.get_execution_options().get("toolscope_write", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def begin_write() -> None:
    """Open the request's transaction as a writer (must be called before its first query)."""
    db.session.connection(execution_options={"toolscope_write": True})


# --- the read timeout (READ_TIMEOUT_MS) ---------------------------------------------------------
#
# A page or API GET that reads for longer than READ_TIMEOUT_MS has its query stopped and is
# answered 503 `query_timeout`, so no request runs into gunicorn's timeout (which kills the
# worker and drops the connection). Armed when a read transaction of a GET or HEAD request
# begins: SQLite calls a progress handler every few thousand steps of its VM, which stops the
# statement once the deadline has passed (sqlite3.OperationalError "interrupted"); PostgreSQL
# gets `SET LOCAL statement_timeout` (SQLSTATE 57014). Write transactions (`begin_write`) and
# work outside a request (the token pass, the CLI) are not limited. The deadline holds for the
# whole transaction on SQLite, for each statement on PostgreSQL.

READ_TIMEOUT_CODE = "query_timeout"
_PROGRESS_STEPS = 4_000


def _read_timeout_ms(conn: Any) -> int:
    if not has_request_context() or request.method not in ("GET", "HEAD"):
        return 0
    if conn.get_execution_options().get("toolscope_write", False):
        return 0
    return int(current_app.config.get("READ_TIMEOUT_MS") or 0)


def _arm_sqlite_read_timeout(conn: Any) -> None:
    timeout_ms = _read_timeout_ms(conn)
    if timeout_ms <= 0:
        _disarm_sqlite_read_timeout(conn)  # none left over from a read: a write is not limited
        return
    deadline = time.monotonic() + timeout_ms / 1000
    conn.connection.dbapi_connection.set_progress_handler(
        lambda: time.monotonic() > deadline, _PROGRESS_STEPS
    )


def _disarm_sqlite_read_timeout(conn: Any) -> None:
    dbapi_connection = conn.connection.dbapi_connection
    if dbapi_connection is not None:
        dbapi_connection.set_progress_handler(None, 0)


def _arm_postgresql_read_timeout(conn: Any) -> None:
    timeout_ms = _read_timeout_ms(conn)
    if timeout_ms > 0:
        conn.exec_driver_sql(f"SET LOCAL statement_timeout = {timeout_ms}")


def is_read_timeout(exc: BaseException) -> bool:
    """A read stopped by READ_TIMEOUT_MS (SQLite's progress handler, PostgreSQL's
    statement_timeout)."""
    if not isinstance(exc, OperationalError):
        return False
    if getattr(exc.orig, "sqlstate", None) == "57014":
        return True
    return isinstance(exc.orig, sqlite3.OperationalError) and "interrupted" in str(exc.orig)


# Flask-Migrate imports Alembic (~10 MB, 0.5 s), which only `toolscope db ...` and the tests
# of the migrations use: a gunicorn master that imported it would give it to every worker's RSS.
# So the `db` command and app.extensions["migrate"] stand in for it until first used.


def _migrations(app: Flask) -> Any:
    """Flask-Migrate set up on `app` (once): its config, with the real `db` command group."""
    current = app.extensions.get("migrate")
    if not isinstance(current, _DeferredMigrations):
        return current
    from flask_migrate import Migrate

    Migrate().init_app(app, db, directory=paths.MIGRATIONS, render_as_batch=True)
    return app.extensions["migrate"]


class _DeferredMigrations:
    """app.extensions["migrate"] until something reads it (flask_migrate.upgrade() does)."""

    def __init__(self, app: Flask):
        self._app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(_migrations(self._app), name)


class _DeferredMigrationsCommand(click.Command):
    """`toolscope db ...`: hands its arguments to Flask-Migrate's group, imported then."""

    def __init__(self, app: Flask):
        super().__init__(
            "db",
            help="Perform database migrations.",
            context_settings={
                "ignore_unknown_options": True,
                "allow_extra_args": True,
                "help_option_names": [],  # --help is the real group's
            },
        )
        self._app = app

    def invoke(self, ctx: click.Context) -> Any:
        _migrations(self._app)
        from flask_migrate.cli import db as group

        with group.make_context(ctx.info_name, list(ctx.args), parent=ctx.parent) as real:
            return group.invoke(real)


def _defer_migrations(app: Flask) -> None:
    app.extensions["migrate"] = _DeferredMigrations(app)
    app.cli.add_command(_DeferredMigrationsCommand(app), name="db")


def init_app(app: Flask) -> None:
    busy_timeout = app.config["SQLITE_BUSY_TIMEOUT_MS"]
    db.init_app(app)
    _defer_migrations(app)
    with app.app_context():
        engine: Engine = db.engine
        if engine.dialect.name == "sqlite":
            event.listen(
                engine,
                "connect",
                lambda conn, _record: _configure_sqlite(conn, busy_timeout),
            )
            event.listen(engine, "begin", _begin_sqlite)
            event.listen(engine, "begin", _arm_sqlite_read_timeout)
            event.listen(engine, "commit", _disarm_sqlite_read_timeout)
            event.listen(engine, "rollback", _disarm_sqlite_read_timeout)
        elif engine.dialect.name == "postgresql":
            lock_timeout = int(app.config["PG_LOCK_TIMEOUT_MS"])
            event.listen(
                engine,
                "connect",
                lambda conn, _record: _configure_postgresql(conn, lock_timeout),
            )
            event.listen(engine, "begin", _arm_postgresql_read_timeout)
