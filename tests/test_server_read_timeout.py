"""A page or API GET that reads past READ_TIMEOUT_MS is stopped and answered 503
`query_timeout` (JSON for the API and the JSON twins, a short HTML page otherwise), and the
worker goes on serving; writes and work outside a request are not limited (issue 24, item 4).
Before, a slow read ran until gunicorn's timeout killed the worker and dropped the connection."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from webapp.db import begin_write, db

TIMEOUT_MS = 100
# About ten seconds of work on either database, unbounded by anything but the timeout.
SLOW = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000000) "
    "SELECT count(*) FROM c"
)
# About a second: more than the timeout, within a write's rights.
MEDIUM = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1500000) "
    "SELECT count(*) FROM c"
)


@pytest.fixture
def app_config():
    return {"READ_TIMEOUT_MS": TIMEOUT_MS}


@pytest.fixture
def served(app):
    def slow():
        return {"count": db.session.scalar(text(SLOW))}

    def medium():
        return {"count": db.session.scalar(text(MEDIUM))}

    def medium_write():
        begin_write()
        count = db.session.scalar(text(MEDIUM))
        db.session.commit()
        return {"count": count}

    app.add_url_rule("/api/v1/test-slow", "test_slow_api", slow)
    app.add_url_rule("/test-slow", "test_slow_page", slow)
    app.add_url_rule("/api/v1/test-medium", "test_medium", medium)
    app.add_url_rule("/api/v1/test-medium-write", "test_medium_write", medium_write)
    return app.test_client()


def test_a_slow_read_is_stopped_and_answered_503(app, served):
    for _ in range(2):
        started = time.monotonic()
        response = served.get("/api/v1/test-slow")
        took = time.monotonic() - started
        assert response.status_code == 503, response.data[:300]
        assert response.headers["Retry-After"] == "5"
        error = response.get_json()["error"]
        assert error["code"] == "query_timeout"
        assert "0.1 s" in error["message"]
        assert took < 5, took
        page = served.get("/test-slow")
        assert page.status_code == 503 and page.mimetype == "text/html"
        assert b"took too long" in page.data
        # The worker goes on serving, on the same connections.
        assert served.get("/api/v1/openapi.json").status_code in (200, 401, 404)
        with app.app_context():
            assert db.session.scalar(text("SELECT 1")) == 1


def test_writes_and_work_outside_a_request_are_not_limited(app, served):
    assert served.get("/api/v1/test-medium").status_code == 503
    response = served.get("/api/v1/test-medium-write")
    assert response.status_code == 200, response.data[:300]
    assert response.get_json() == {"count": 1500000}
    with app.app_context():
        assert db.session.scalar(text(MEDIUM)) == 1500000
    # The timeout armed for a read does not follow the connection into a later write.
    assert served.get("/api/v1/test-medium").status_code == 503
    assert served.get("/api/v1/test-medium-write").status_code == 200


@pytest.mark.parametrize("app_config", [{"READ_TIMEOUT_MS": 0}])
def test_zero_turns_it_off(app, served):
    assert served.get("/api/v1/test-medium").get_json() == {"count": 1500000}
