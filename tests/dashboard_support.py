"""Fixtures and helpers shared by the dashboard tests (``test_html_*``, ``test_browser_*``).

Import the fixtures you use into the test module by their function name, e.g.
``from dashboard_support import dashboard_fixture  # noqa: F401``; tests then ask for
``dashboard``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import flask
import pytest
from html_dom import Node, parse

from webapp.auth import SESSION_TOKEN, start_dashboard_session
from webapp.db import db
from webapp.ingest.rollups import rebuild as rebuild_rollups

HTMX = {"HX-Request": "true"}
# Every dashboard request looks its login token up first (one query), before its own queries.
LOGIN_CHECK = 1


def log_in(app, client) -> str:
    """Log ``client`` in to the dashboard as a right password does; the login token."""
    with app.test_request_context():
        start_dashboard_session()
        db.session.commit()
        token = flask.session[SESSION_TOKEN]
    with client.session_transaction() as session:
        session[SESSION_TOKEN] = token
    return token


@pytest.fixture(name="dashboard")
def dashboard_fixture(app, client, project_key):
    """A test client logged in to the dashboard, on the ``default`` project."""
    log_in(app, client)
    with client.session_transaction() as session:
        session["project_id"] = project_key.project_id
    return client


@contextmanager
def data(app) -> Iterator[None]:
    """``with data(app): factories...`` builds rows and commits them. The factories write rows
    straight through the models, past the write paths that keep the roll-ups: they are
    recomputed from the rows before the commit (webapp.ingest.rollups.rebuild)."""
    with app.app_context():
        yield
        rebuild_rollups()
        db.session.commit()


def page(response: Any) -> Node:
    assert response.status_code == 200, response.data[:2000]
    return parse(response.data)


def csrf_token(client) -> str:
    """A CSRF token of the client's session, as the pages embed it."""
    doc = page(client.get("/settings"))
    return doc.select("input[name=csrf_token]")[0].get("value") or ""


def count_get(client, count_queries, url: str, **kwargs: Any) -> tuple[int, Any]:
    """Statements run by one GET (after a warm-up GET of the same URL)."""
    client.get(url, **kwargs)
    with count_queries() as counter:
        response = client.get(url, **kwargs)
    return counter.count, response
