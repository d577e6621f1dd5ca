"""Shared fixtures: an app on a real SQLite file and on the real PostgreSQL server.

Every test that uses `app` (or `client`, `api`, ...) runs once per database. PostgreSQL tests use
a database of their own, created for this test session and dropped at its end, so that several
test runs on one machine never see each other's rows.

Set TOOLSCOPE_TEST_PG_URL to point elsewhere; TOOLSCOPE_TEST_REQUIRE_PG=1 (set by .ci/run) turns
"PostgreSQL is not running" from a skip into a failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from werkzeug.serving import make_server

from webapp import create_app
from webapp.auth import create_key, get_or_create_project
from webapp.db import db

PG_ADMIN_URL = os.environ.get(
    "TOOLSCOPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REQUIRE_PG = os.environ.get("TOOLSCOPE_TEST_REQUIRE_PG") == "1"
DATABASES = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"toolscope_test_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as exc:
        admin.dispose()
        if REQUIRE_PG:
            pytest.fail(f"PostgreSQL is required but not reachable: {exc}")
        pytest.skip("PostgreSQL server not reachable")
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name)
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'toolscope.db'}"
    return request.getfixturevalue("pg_database_url")


def make_test_app(database_url: str, **overrides: Any):
    config = {
        "TESTING": True,
        "DATABASE_URL": database_url,
        "SECRET_KEY": "test-secret",
        "PASSWORD": "test-password",
        "DEV": False,
        "SESSION_COOKIE_SECURE": False,
    }
    config.update(overrides)
    return create_app(config)


def _reset_schema() -> None:
    """Start every test from empty tables, fast on both databases."""
    if db.engine.dialect.name == "postgresql":
        db.create_all()
        tables = ", ".join(f'"{t.name}"' for t in db.metadata.sorted_tables)
        with db.engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
    else:
        db.create_all()


@pytest.fixture
def app_config() -> dict[str, Any]:
    """Override in a test module to change settings for its app."""
    return {}


@pytest.fixture
def app(database_url: str, app_config: dict[str, Any]):
    app = make_test_app(database_url, **app_config)
    with app.app_context():
        _reset_schema()
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runner(app):
    return app.test_cli_runner()


@dataclass
class ProjectKey:
    project_id: int
    slug: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def add_project_key(app, slug: str = "default") -> ProjectKey:
    with app.app_context():
        project = get_or_create_project(slug)
        _key, plain = create_key(project, "test")
        db.session.commit()
        return ProjectKey(project.id, slug, plain)


@pytest.fixture
def project_key(app) -> ProjectKey:
    return add_project_key(app, "default")


@pytest.fixture
def other_project_key(app) -> ProjectKey:
    return add_project_key(app, "other")


class QueryCounter:
    def __init__(self) -> None:
        self.statements: list[str] = []

    @property
    def count(self) -> int:
        return len(self.statements)


@pytest.fixture
def count_queries(app):
    """`with count_queries() as q: ...; assert q.count <= N` counts SQL statements sent."""

    @contextlib.contextmanager
    def counting() -> Iterator[QueryCounter]:
        counter = QueryCounter()

        def before(_conn, _cursor, statement, *_args: Any) -> None:
            if not statement.lstrip().upper().startswith(("BEGIN", "PRAGMA", "SAVEPOINT")):
                counter.statements.append(statement)

        with app.app_context():
            engine = db.engine
        event.listen(engine, "before_cursor_execute", before)
        try:
            yield counter
        finally:
            event.remove(engine, "before_cursor_execute", before)

    return counting


@pytest.fixture
def sqlite_writer(app) -> Iterator[sa.Connection]:
    """Another connection holding SQLite's write lock, as a concurrent request would."""
    if not app.config["DATABASE_URL"].startswith("sqlite"):
        pytest.skip("PostgreSQL has row locks; there is no database-wide write lock")
    with app.app_context():
        writer = sa.create_engine(app.config["DATABASE_URL"]).connect()
    writer.exec_driver_sql("BEGIN IMMEDIATE")
    yield writer
    writer.exec_driver_sql("ROLLBACK")
    writer.close()
    with app.app_context():
        db.session.remove()


@pytest.fixture
def live_server(app) -> Iterator[str]:
    """The app served over real HTTP on a free loopback port (threaded WSGI server)."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)
