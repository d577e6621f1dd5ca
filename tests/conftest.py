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
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from shared_setup import worker_id
from sqlalchemy import event
from werkzeug.serving import make_server
from werkzeug.wsgi import ClosingIterator

from webapp import create_app
from webapp.auth import create_key, get_or_create_project
from webapp.db import db
from webapp.models import ApiState

PG_ADMIN_URL = os.environ.get(
    "TOOLSCOPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REQUIRE_PG = os.environ.get("TOOLSCOPE_TEST_REQUIRE_PG") == "1"
DATABASES = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    # Unique per process: each xdist worker is a session of its own with its own database.
    name = f"toolscope_test_{worker_id()}_{os.getpid()}_{secrets.token_hex(3)}"
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
    db.create_all()
    if db.engine.dialect.name == "postgresql":
        _empty_postgres_tables()


def _empty_postgres_tables() -> None:
    """What `TRUNCATE ... RESTART IDENTITY CASCADE` did, at a tenth of its cost (~15 ms instead
    of ~160 ms a test: TRUNCATE makes new files for every table and index, DELETE on a few rows
    does not). Children before parents, so no foreign key is in the way; api_state last, since
    the statement-level DELETE triggers on project, api_key and redaction_rule write its row."""
    api_state = ApiState.__table__
    tables = [t for t in reversed(db.metadata.sorted_tables) if t is not api_state] + [api_state]
    with db.engine.begin() as conn:
        sequences = (
            conn.exec_driver_sql(
                "SELECT format('%%I.%%I', schemaname, sequencename) FROM pg_sequences"
                " WHERE schemaname = current_schema()"
            )
            .scalars()
            .all()
        )
        conn.exec_driver_sql(
            "; ".join(
                [f'DELETE FROM "{t.name}"' for t in tables]
                + [f"ALTER SEQUENCE {sequence} RESTART" for sequence in sequences]
            )
        )


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite file with the schema, made once per session (per xdist worker): copying it
    takes under a millisecond where `create_all` on a new file took ~60 ms a test."""
    path = tmp_path_factory.mktemp("sqlite-template") / "schema.db"
    template = make_test_app(f"sqlite:///{path}")
    with template.app_context():
        db.create_all()
        db.session.remove()
        db.engine.dispose()
    # The last connection's close checkpoints the WAL into the file; a copy of the file alone
    # must hold everything.
    assert not path.with_name(path.name + "-wal").exists()
    return path


def _start_from_template(database_url: str, request: pytest.FixtureRequest) -> None:
    """Copy the schema template to a SQLite file that does not exist yet (a file a test made
    itself keeps what it has; `_reset_schema` still runs `create_all` on both)."""
    url = sa.engine.make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return
    path = Path(url.database)
    if not path.exists():
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)


@pytest.fixture
def app_config() -> dict[str, Any]:
    """Override in a test module to change settings for its app."""
    return {}


@pytest.fixture
def fake() -> Iterator[Any]:
    """A fake model provider on loopback that speaks the OpenAI and Anthropic wire formats
    (tests/fake_providers.py), for the runs' and studies' tests (tests/runs_support.py)."""
    from runs_support import fake_server

    yield from fake_server()


@pytest.fixture
def app(database_url: str, app_config: dict[str, Any], request: pytest.FixtureRequest):
    _start_from_template(database_url, request)
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


# Not queries: transaction control and settings (READ_TIMEOUT_MS's SET LOCAL, webapp/db.py).
NOT_QUERIES = ("BEGIN", "PRAGMA", "SAVEPOINT", "SET LOCAL STATEMENT_TIMEOUT")


@pytest.fixture
def count_queries(app):
    """`with count_queries() as q: ...; assert q.count <= N` counts SQL statements sent."""

    @contextlib.contextmanager
    def counting() -> Iterator[QueryCounter]:
        counter = QueryCounter()

        def before(_conn, _cursor, statement, *_args: Any) -> None:
            if not statement.lstrip().upper().startswith(NOT_QUERIES):
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


class _InFlight:
    """WSGI middleware counting the requests being served, so that teardown can wait for the
    last one: a request a browser left running when its test ended still holds a pooled
    database connection, and if the `app` fixture disposes the engine first, that connection
    is never closed (a ResourceWarning, an error in whichever test is running when it is
    collected)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.idle = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        # Static files are read whole and closed at once (PEP 3333's optional file wrapper):
        # werkzeug's threaded server does not close a body when the browser dropped the
        # connection and reading what is left of it fails too, and the open file was collected
        # in a later test (a ResourceWarning, an error there).
        environ["wsgi.file_wrapper"] = _read_whole
        with self.idle:
            self.count += 1
        try:
            body = self.app(environ, start_response)
        except BaseException:
            self._done()
            raise
        # The server closes the body when the response is sent or the client went away.
        return ClosingIterator(body, [self._done])

    def _done(self) -> None:
        with self.idle:
            self.count -= 1
            self.idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self.idle:
            return self.idle.wait_for(lambda: self.count == 0, timeout)


def _read_whole(file: Any, _buffer_size: int = 8192) -> list[bytes]:
    try:
        return [file.read()]
    finally:
        file.close()


@pytest.fixture
def live_server(app) -> Iterator[str]:
    """The app served over real HTTP on a free loopback port (threaded WSGI server)."""
    served = _InFlight(app)
    server = make_server("127.0.0.1", 0, served, threaded=True)
    # shutdown() waits for the serve loop to notice: with the default 0.5 s poll that was up to
    # half a second of teardown for each of the ~150 tests that use this fixture.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)
        served.wait_idle(timeout=10)
        server.server_close()
