"""The SQLAlchemy handle, column types shared by the models, and connection set-up."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import JSON, DateTime, MetaData, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Engine
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
        elif engine.dialect.name == "postgresql":
            lock_timeout = int(app.config["PG_LOCK_TIMEOUT_MS"])
            event.listen(
                engine,
                "connect",
                lambda conn, _record: _configure_postgresql(conn, lock_timeout),
            )
