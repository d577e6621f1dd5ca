"""API keys on the API: use is recorded, and recording it never fails a request."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from api_support import raw_rows

from webapp.db import db


@pytest.fixture
def app_config():
    return {"SQLITE_BUSY_TIMEOUT_MS": 200}


def test_a_read_records_when_the_key_was_last_used(app, client, project_key):
    assert raw_rows(app, "SELECT last_used_at FROM api_key") == [(None,)]
    assert client.get("/api/v1/channels", headers=project_key.headers).status_code == 200
    (last_used,) = raw_rows(app, "SELECT last_used_at FROM api_key")[0]
    assert last_used is not None


def test_a_read_succeeds_while_another_writer_holds_the_sqlite_lock(app, client, project_key):
    """Recording the key's use would need the write lock; the read must not wait or fail."""
    if not app.config["DATABASE_URL"].startswith("sqlite"):
        pytest.skip("PostgreSQL has row locks; there is no database-wide write lock")
    with app.app_context():
        writer = sa.create_engine(app.config["DATABASE_URL"]).connect()
    try:
        writer.exec_driver_sql("BEGIN IMMEDIATE")
        response = client.get("/api/v1/conversations", headers=project_key.headers)
        assert response.status_code == 200, response.get_data(as_text=True)
    finally:
        writer.exec_driver_sql("ROLLBACK")
        writer.close()
    with app.app_context():
        db.session.remove()
