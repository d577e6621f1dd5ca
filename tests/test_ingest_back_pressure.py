"""Back-pressure: a database that cannot take a write in time is a 503 with Retry-After, which
clients retry; never a 500, and never part of a batch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from api_support import assert_error, raw_rows, tool_item

from webapp.db import db

TOOLS_URL = "/api/v1/messages/tools"


@pytest.fixture
def app_config():
    return {"SQLITE_BUSY_TIMEOUT_MS": 200, "PG_LOCK_TIMEOUT_MS": 200}


@contextlib.contextmanager
def held_lock(app) -> Iterator[None]:
    """Another connection holds what a MessageTool write for message "m1" needs: SQLite's write
    lock, or the message's row lock on PostgreSQL."""
    engine = sa.create_engine(app.config["DATABASE_URL"])
    other = engine.connect()
    try:
        if other.dialect.name == "sqlite":
            other.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            other.exec_driver_sql("BEGIN")
            locked = other.exec_driver_sql(
                "SELECT id FROM message WHERE external_id = 'm1' FOR UPDATE"
            ).all()
            assert len(locked) == 1
        yield
    finally:
        other.exec_driver_sql("ROLLBACK")
        other.close()
        engine.dispose()
        with app.app_context():
            db.session.remove()


def post(client, key, tools):
    return client.post(TOOLS_URL, json={"messageId": "m1", "tools": tools}, headers=key.headers)


def calls_stored(app) -> int:
    return raw_rows(app, "SELECT COUNT(*) FROM tool_invocation")[0][0]


@pytest.fixture
def first_call(client, project_key) -> None:
    assert post(client, project_key, [tool_item(0, 0)]).status_code == 201


def test_a_write_that_cannot_get_in_is_a_503_and_writes_nothing(
    app, client, project_key, first_call
):
    batch = [tool_item(0, 0)] + [tool_item(1, s, response="r") for s in range(20)]
    with held_lock(app):
        response = post(client, project_key, batch)
    error = assert_error(response, 503, "busy")
    assert "retry" in error["message"]
    assert response.headers["Retry-After"] == "1"
    assert calls_stored(app) == 1  # nothing of the batch


def test_the_retry_after_the_lock_is_released_stores_the_batch_once(
    app, client, project_key, first_call
):
    batch = [tool_item(0, 0)] + [tool_item(1, s, response="r") for s in range(20)]
    with held_lock(app):
        assert post(client, project_key, batch).status_code == 503
    retried = post(client, project_key, batch)
    assert retried.status_code == 201, retried.get_data(as_text=True)
    assert len(retried.get_json()["data"]) == 21
    assert post(client, project_key, batch).status_code == 201  # a second retry: a no-op
    assert calls_stored(app) == 21


def test_an_exhausted_connection_pool_is_a_503(app, client, project_key, monkeypatch):
    """Every connection of the worker's pool busy (SQLAlchemy's pool timeout) is back-pressure
    too, wherever in the request it happens."""
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    import webapp.ingest.transaction as transaction

    def exhausted() -> None:
        raise PoolTimeout("QueuePool limit of size 5 overflow 10 reached")

    monkeypatch.setattr(transaction, "begin_write", exhausted)
    response = post(client, project_key, [tool_item(0, 0, response="r")])
    assert_error(response, 503, "busy")
    assert response.headers["Retry-After"] == "1"
    assert calls_stored(app) == 0
