"""Addresses agents know: /c/<conversation id> opens the conversation, whatever the id holds;
the page, its JSON twin and the call detail carry both ids."""

from __future__ import annotations

from urllib.parse import quote

import factories as f
import pytest
from dashboard_support import dashboard_fixture, data, page  # noqa: F401
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation

IDS = [
    "support-42",
    "a/b",
    "/leading",
    "double//slash",
    "trailing/",
    "../up",
    "what? #1 100%",
    "ünï 会話",
    "x.json",
]


@pytest.mark.parametrize("external_id", IDS)
def test_c_address_redirects_to_the_conversation(app, dashboard, project_key, external_id):
    with data(app):
        conv = f.conversation(project_key.project_id, external_id)
        row_id = conv.id
    response = dashboard.get("/c/" + quote(external_id, safe=""))
    assert response.status_code == 302, response.data[:300]
    assert response.headers["Location"] == f"/conversations/{row_id}"
    doc = page(dashboard.get("/c/" + quote(external_id, safe=""), follow_redirects=True))
    link = doc.one("a.conv-address")
    assert link.text == external_id
    assert link.get("href") == "/c/" + quote(external_id, safe="")


def test_c_address_keeps_the_query_and_refuses_unknown_ids(app, dashboard, project_key):
    with data(app):
        conv = f.conversation(project_key.project_id, "support-42")
        f.conversation(project_key.project_id, "support-4")
        row_id = conv.id
    response = dashboard.get("/c/support-42?cursor=abc")
    assert response.headers["Location"] == f"/conversations/{row_id}?cursor=abc"
    # fmt=json asks for the JSON twin.
    response = dashboard.get("/c/support-42?fmt=json")
    assert response.headers["Location"] == f"/conversations/{row_id}.json"
    # Query names that url_for would read itself are dropped, not obeyed (nor a 500).
    response = dashboard.get(
        "/c/support-42?conversation_id=7&_external=1&_scheme=javascript&_anchor=x&view=errors"
    )
    assert response.status_code == 302
    assert response.headers["Location"] == f"/conversations/{row_id}?view=errors"
    assert dashboard.get("/c/support-43").status_code == 404
    assert dashboard.get("/c/SUPPORT-42").status_code == 404


def test_c_address_is_per_project(app, dashboard, project_key, other_project_key):
    with data(app):
        f.conversation(other_project_key.project_id, "theirs")
    assert dashboard.get("/c/theirs").status_code == 404


def test_twins_carry_both_ids(app, dashboard, project_key):
    with data(app):
        conv = f.support_conversation(project_key.project_id, "support/7")
        row_id = conv.id
    body = dashboard.get(f"/conversations/{row_id}.json").get_json()
    assert body["conversation"]["id"] == row_id
    assert body["conversation"]["external_id"] == "support/7"
    assert body["address"] == "/c/support%2F7"
    with app.app_context():
        call_id = db.session.scalar(select(ToolInvocation.id).limit(1))
    detail = dashboard.get(f"/calls/{call_id}.json").get_json()
    assert detail["conversation"] == {
        "id": row_id,
        "external_id": "support/7",
        "address": "/c/support%2F7",
    }
    listing = dashboard.get("/conversations.json").get_json()["data"][0]
    assert (listing["id"], listing["external_id"]) == (row_id, "support/7")
