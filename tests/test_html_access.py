"""Login, the DEV loopback bypass, the project switcher and the security headers (the login's
own defences: tests/test_html_login.py)."""

from __future__ import annotations

import re

import factories as f
import plotly
import pytest
from dashboard_support import (  # noqa: F401
    HTMX,
    csrf_token,
    dashboard_fixture,
    data,
    log_in,
    page,
)
from html_dom import parse
from sqlalchemy import select

from webapp.db import db
from webapp.models import Project

PAGES = ("/conversations", "/tools", "/costs", "/settings")


def login_token(client) -> str:
    return parse(client.get("/login").data).one("input[name=csrf_token]").get("value")


@pytest.mark.parametrize("url", PAGES)
def test_pages_need_a_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response.headers["Location"] == f"/login?next={url}"
    twin = client.get(url + ".json")
    assert twin.status_code == 401 and twin.get_json()["error"]["code"] == "unauthorized"
    htmx = client.get(url, headers=HTMX)
    assert htmx.status_code == 204 and htmx.headers["HX-Redirect"].startswith("/login")


def test_login_with_the_password_goes_to_next(client):
    token = login_token(client)
    wrong = client.post("/login", data={"csrf_token": token, "password": "nope", "next": "/tools"})
    assert wrong.status_code == 401 and "Wrong password" in wrong.get_data(as_text=True)
    right = client.post(
        "/login", data={"csrf_token": token, "password": "test-password", "next": "/tools"}
    )
    assert right.status_code == 302 and right.headers["Location"] == "/tools"
    assert client.get("/tools").status_code == 200
    logout = client.post("/logout", data={"csrf_token": csrf_token(client)})
    assert logout.status_code == 302
    assert client.get("/tools").status_code == 302


def test_login_page_does_not_reveal_projects(app, client, project_key):
    doc = page(client.get("/login"))
    assert not doc.select("#project-select") and not doc.select("nav.nav")


@pytest.mark.parametrize("app_config", [{"PASSWORD": None}])
def test_without_a_password_the_dashboard_is_closed(client):
    doc = page(client.get("/login"))
    assert "TOOLSCOPE_PASSWORD" in doc.text and not doc.select("input[type=password]")
    for password in ("", "test-password", "None"):
        assert client.post("/login", data={"password": password}).status_code in (400, 401)
    assert client.get("/conversations").status_code == 302


@pytest.mark.parametrize("app_config", [{"DEV": True}])
def test_dev_mode_opens_the_dashboard_to_loopback_only(client):
    assert client.get("/conversations").status_code == 200
    remote = client.get("/conversations", environ_base={"REMOTE_ADDR": "10.1.2.3"})
    assert remote.status_code == 302


def test_a_fresh_install_gets_the_default_project(app, client):
    log_in(app, client)
    assert client.get("/conversations").status_code == 200
    with app.app_context():
        assert db.session.scalars(select(Project.slug)).all() == ["default"]


def test_the_project_switcher(app, dashboard, project_key, other_project_key):
    with data(app):
        f.simple_conversation(project_key.project_id, "mine")
        f.simple_conversation(other_project_key.project_id, "theirs")
    ours = page(dashboard.get("/conversations"))
    assert [o.text for o in ours.select("#project-select option")] == ["default", "other"]
    assert "mine" in ours.one("#conv-rows").text
    token = csrf_token(dashboard)
    switched = dashboard.post(
        "/project", data={"csrf_token": token, "project_id": other_project_key.project_id}
    )
    assert switched.status_code == 302
    theirs = page(dashboard.get("/conversations"))
    assert "theirs" in theirs.one("#conv-rows").text and "mine" not in theirs.one("#conv-rows").text
    assert theirs.one("#project-select option[selected]").text == "other"
    by_htmx = dashboard.post(
        "/project",
        data={"csrf_token": token, "project_id": project_key.project_id},
        headers=HTMX,
    )
    assert by_htmx.status_code == 204 and by_htmx.headers["HX-Redirect"] == "/conversations"
    assert (
        dashboard.post("/project", data={"csrf_token": token, "project_id": 999}).status_code == 404
    )
    assert dashboard.post("/project", data={"project_id": 1}).status_code == 400  # no CSRF token


@pytest.mark.parametrize("url", PAGES)
def test_pages_forbid_inline_script(app, dashboard, project_key, url):
    with data(app):
        f.support_conversation(project_key.project_id)
    response = dashboard.get(url)
    policy = response.headers["Content-Security-Policy"]
    script_src = re.search(r"script-src ([^;]*)", policy).group(1)
    assert script_src == "'self'"
    assert "frame-ancestors 'none'" in policy and response.headers["X-Frame-Options"] == "DENY"
    doc = parse(response.data)
    for script in doc.select("script"):
        assert script.get("src", "").startswith("/static/") and not script.text.strip()
    for element in doc.iter():
        assert not [a for a in element.attrs if a.startswith("on")], element.tag
        assert not (element.get("href") or "").lower().startswith("javascript:")


def test_plotly_is_served_locally_and_cached(app, client):
    url = f"/vendor/plotly-{plotly.__version__}.min.js"
    with client.get(url) as response:
        assert response.status_code == 200 and response.mimetype == "text/javascript"
        assert "max-age=31536000" in response.headers["Cache-Control"]
    assert client.get("/vendor/plotly-0.0.1.min.js").status_code == 404
    # Every page points at that URL, nothing at another host.
    log_in(app, client)
    doc = parse(client.get("/conversations").data)
    assert doc.one("meta[name=plotly-src]").get("content") == url
    for element in doc.iter():
        for attr in ("src", "href", "action"):
            value = element.get(attr) or ""
            assert not value.startswith(("http:", "https:", "//")), value


@pytest.mark.parametrize(
    "url",
    [
        "/conversations/2147483648",  # over PostgreSQL's integer
        "/conversations/99999999999999999999.json",  # over SQLite's and PostgreSQL's bigint
        "/conversations/2147483648/replay",
        "/conversations/1/messages/9223372036854775808/calls",
        "/calls/9223372036854775808",
        "/calls/99999999999999999999/response.txt",
    ],
)
def test_ids_out_of_range_are_not_found(dashboard, url):
    assert dashboard.get(url).status_code == 404


def test_ids_out_of_range_in_forms_are_not_found(dashboard, project_key):
    token = csrf_token(dashboard)
    for url in ("/settings/rules/2147483648/delete", "/settings/keys/99999999999999999999/revoke"):
        assert dashboard.post(url, data={"csrf_token": token}).status_code == 404
    for project_id in ("2147483648", "99999999999999999999", "-1"):
        switched = dashboard.post("/project", data={"csrf_token": token, "project_id": project_id})
        assert switched.status_code == 404
    live = dashboard.get("/conversations/1/live?calls=99999999999999999999")
    assert live.status_code in (404, 422)
