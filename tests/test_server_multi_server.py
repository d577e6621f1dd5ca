"""Several servers on one PostgreSQL (issue 10, item 4): two gunicorn servers, each with its own
workers, started as the Procfile starts one, and 8 writer processes sending the SAME
conversations through both — MessageTool batches and native turns, every request sent to one
server and its retry (the same idempotent keys) to the other, at once by all writers.

Nothing may be lost or stored twice, and no answer may be a 5xx other than the 503 a client
retries. Conflicts between the servers can only be settled by the database (unique
constraints, INSERT ... ON CONFLICT, FOR UPDATE): the servers share nothing else.

Runs on a scratch database of its own on the real PostgreSQL server, dropped afterwards.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import tempfile
import time

import pytest
import sqlalchemy as sa
from conftest import PG_ADMIN_URL, REQUIRE_PG
from multi_server_writer import (
    CALLS_PER_BATCH,
    CALLS_PER_ROUND,
    CONVERSATIONS,
    ROUNDS,
    TOOL_MESSAGES,
    write,
)

from webapp import create_app
from webapp.auth import create_key, get_or_create_project
from webapp.bench.server import _wait_until_answering, free_port, gunicorn_command
from webapp.db import db

WRITERS = 8
SERVERS = 2
WORKERS_PER_SERVER = 2


@pytest.fixture
def scratch_database():
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"toolscope_multi_{free_port()}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.OperationalError as exc:
        admin.dispose()
        if REQUIRE_PG:
            pytest.fail(f"PostgreSQL is required but not reachable: {exc}")
        pytest.skip("PostgreSQL server not reachable")
    try:
        yield sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@contextlib.contextmanager
def servers_on(database_url: str, secret: str):
    """Two gunicorn servers with the production settings (as the Procfile runs one), started
    together; stopped afterwards."""
    env = {**os.environ, "TOOLSCOPE_DATABASE_URL": database_url, "TOOLSCOPE_SECRET_KEY": secret}
    started: list[tuple[subprocess.Popen, int, object]] = []
    with contextlib.ExitStack() as stack:
        stack.callback(_stop, started)
        for _ in range(SERVERS):
            port = free_port()
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            process = subprocess.Popen(
                gunicorn_command(port, WORKERS_PER_SERVER, None, None),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped with its workers
            )
            started.append((process, port, log))
        for process, port, log in started:
            _wait_until_answering(process, port, log)
        yield [f"http://127.0.0.1:{port}" for _process, port, _log in started]


def _stop(started: list[tuple[subprocess.Popen, int, object]]) -> None:
    """Stop the servers and their workers. Every answer has been received, so nothing is left
    to finish: gunicorn's own shutdown takes seconds, its process group is killed instead."""
    for process, _port, _log in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_two_servers_eight_writers_the_same_conversations(scratch_database):
    # The schema, once, before the servers start (the Procfile's release step does it with
    # `toolscope db upgrade`; tests/test_migrations*.py check that both give the same schema).
    app = create_app({"DATABASE_URL": scratch_database, "SECRET_KEY": "t"})
    with app.app_context():
        db.create_all()
        _key, key = create_key(get_or_create_project("default"), "writers")
        db.session.commit()
        db.session.remove()
        db.engine.dispose()

    with servers_on(scratch_database, "shared-secret") as servers:
        context = multiprocessing.get_context("spawn")
        start_at = time.time() + 1.5  # the processes' start-up, so they collide
        with context.Pool(WRITERS) as pool:
            results = pool.starmap(
                write, [(servers, key, w, start_at) for w in range(WRITERS)]
            )

    answers = [a for result in results for a in result]
    statuses = [status for _path, status in answers]
    final = [s for s in statuses if s != 503]
    requests_sent = WRITERS * SERVERS * (CONVERSATIONS + TOOL_MESSAGES)
    assert len(final) == requests_sent
    assert set(final) == {201}, sorted({(p, s) for p, s in answers if s != 201})
    assert all(s == 201 or s == 503 for s in statuses)

    engine = sa.create_engine(scratch_database)
    try:
        with engine.connect() as conn:

            def scalar(sql: str) -> int:
                return conn.exec_driver_sql(sql).scalar_one()

            assert scalar("SELECT count(*) FROM conversation") == CONVERSATIONS
            assert scalar("SELECT count(*) FROM message") == 2 * CONVERSATIONS + TOOL_MESSAGES
            assert scalar("SELECT count(*) FROM tool_invocation") == (
                CONVERSATIONS * ROUNDS * CALLS_PER_ROUND + TOOL_MESSAGES * CALLS_PER_BATCH
            )
            assert scalar("SELECT count(*) FROM service_call") == CONVERSATIONS * ROUNDS
            # Every call once, with its response: the writers that sent the responses won,
            # whatever the order (a response is added to a call stored without one).
            assert scalar("SELECT count(*) FROM tool_invocation WHERE response IS NULL") == 0
            assert scalar(
                "SELECT count(*) FROM (SELECT external_id FROM message "
                "GROUP BY project_id, external_id HAVING count(*) > 1) d"
            ) == 0
            assert scalar(
                "SELECT count(*) FROM (SELECT 1 FROM tool_invocation "
                "GROUP BY message_id, round_index, sequence_index HAVING count(*) > 1) d"
            ) == 0
            # Each turn's messages landed in their own conversation, in one piece.
            assert conn.exec_driver_sql(
                "SELECT c.external_id, count(DISTINCT m.id), count(t.id) FROM conversation c "
                "JOIN message m ON m.conversation_id = c.id "
                "LEFT JOIN tool_invocation t ON t.message_id = m.id "
                "GROUP BY c.external_id ORDER BY c.external_id"
            ).all() == [
                (f"ms-{k}", 2, ROUNDS * CALLS_PER_ROUND) for k in range(CONVERSATIONS)
            ]
    finally:
        engine.dispose()
