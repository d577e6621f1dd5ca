"""Saved views: a list page's filters under a name, stored per project (shared with everyone
using it), listed in each list page's menu, saved and deleted by CSRF-protected forms."""

from __future__ import annotations

import pytest
from dashboard_support import HTMX, csrf_token, dashboard_fixture, page  # noqa: F401
from sqlalchemy import select

from webapp.db import db
from webapp.models import Project, SavedView

PAGES = {
    "conversations": "/conversations",
    "calls": "/calls",
    "tools": "/tools",
    "costs": "/costs",
}


def save(client, page_name: str, name: str, query: str, token: str | None = None):
    return client.post(
        "/views",
        data={
            "csrf_token": token or csrf_token(client),
            "page": page_name,
            "name": name,
            "query": query,
        },
    )


def menu(client, page_name: str, current: str = ""):
    headers = {**HTMX, "HX-Current-URL": f"http://localhost{PAGES[page_name]}{current}"}
    return page(client.get(f"/views/menu?page={page_name}", headers=headers))


@pytest.mark.parametrize("page_name", list(PAGES))
def test_each_list_page_has_the_menu_and_a_view_round_trips(app, dashboard, page_name):
    url = PAGES[page_name]
    doc = page(dashboard.get(url))
    details = doc.one("details.saved-views")
    assert details.get("hx-get") == f"/views/menu?page={page_name}"
    empty = menu(dashboard, page_name, "?range=24h")
    assert empty.one(".saved-views-list li").text.strip() == "No saved views yet."
    # The form carries the query the menu opened on.
    assert empty.one("input[name=query]").get("value") == "range=24h"

    response = save(dashboard, page_name, "  Last day  ", "?range=24h&cursor=abc&q=")
    assert response.status_code == 303
    assert response.headers["Location"] == f"{url}?range=24h"
    items = menu(dashboard, page_name).select(".saved-views-list li a")
    assert [(a.text, a.get("href")) for a in items] == [("Last day", f"{url}?range=24h")]
    assert dashboard.get(response.headers["Location"]).status_code == 200

    # The same name again: the view takes the new filters.
    save(dashboard, page_name, "Last day", "range=7d")
    items = menu(dashboard, page_name).select(".saved-views-list li a")
    assert [(a.text, a.get("href")) for a in items] == [("Last day", f"{url}?range=7d")]

    with app.app_context():
        view_id = db.session.scalar(select(SavedView.id))
    response = dashboard.post(
        f"/views/{view_id}/delete", data={"csrf_token": csrf_token(dashboard), "page": page_name}
    )
    assert response.status_code == 303 and response.headers["Location"] == url
    assert not menu(dashboard, page_name).select(".saved-views-list li a")


def test_views_belong_to_their_page_and_project(app, dashboard, project_key):
    save(dashboard, "calls", "Errors", "status=error")
    save(dashboard, "conversations", "Errors", "has_errors=1")
    calls = [a.get("href") for a in menu(dashboard, "calls").select(".saved-views-list li a")]
    assert calls == ["/calls?status=error"]
    with app.app_context():
        other = Project(slug="other", name="Other")
        db.session.add(other)
        db.session.flush()
        db.session.add(SavedView(project_id=other.id, page="calls", name="Theirs", query=""))
        db.session.commit()
        theirs = db.session.scalar(select(SavedView.id).where(SavedView.name == "Theirs"))
    names = [a.text for a in menu(dashboard, "calls").select(".saved-views-list li a")]
    assert names == ["Errors"]
    # Another project's view cannot be deleted from this one.
    response = dashboard.post(
        f"/views/{theirs}/delete", data={"csrf_token": csrf_token(dashboard), "page": "calls"}
    )
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"page": "settings", "name": "x", "query": ""}, "page"),
        ({"page": "calls", "name": "   ", "query": ""}, "name"),
        ({"page": "calls", "name": "x" * 101, "query": ""}, "name"),
        ({"page": "calls", "name": "x", "query": "q=" + "a" * 3000}, "query"),
    ],
)
def test_a_view_that_cannot_be_saved_is_a_422(app, dashboard, form, message):
    response = dashboard.post("/views", data={"csrf_token": csrf_token(dashboard), **form})
    assert response.status_code == 422
    with app.app_context():
        assert db.session.scalar(select(SavedView.id)) is None


def test_saving_needs_the_csrf_token(app, dashboard):
    response = dashboard.post("/views", data={"page": "calls", "name": "x", "query": ""})
    assert response.status_code in (400, 403)
    with app.app_context():
        assert db.session.scalar(select(SavedView.id)) is None


def test_an_unknown_page_has_no_menu(app, dashboard):
    assert dashboard.get("/views/menu?page=nope").status_code == 404
