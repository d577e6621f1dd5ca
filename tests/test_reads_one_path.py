"""One read path: the API and the dashboard's JSON twins read the same thing through the same
query, so they agree on what they find, in which order, and where the next page starts; a
conversation's freshness window follows one rule wherever it is read."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import factories as f
from api_support import assert_error
from dashboard_support import data, log_in

from webapp.db import db
from webapp.models import Project
from webapp.queries.conversations import find_conversation, find_conversations

API = "/api/v1/conversations"


def logged_in(app, client, project_key):
    log_in(app, client)
    with client.session_transaction() as session:
        session["project_id"] = project_key.project_id
    return client


def api_ids(client, project_key, **params) -> tuple[list[str], str | None]:
    body = client.get(API, query_string=params, headers=project_key.headers).get_json()
    return [c["id"] for c in body["data"]], body["next_cursor"]


def twin_ids(client, **params) -> tuple[list[str], str | None]:
    body = client.get("/conversations.json", query_string=params).get_json()
    return [c["external_id"] for c in body["data"]], body["next_cursor"]


def seed(app, project_id: int) -> None:
    now = datetime.now(UTC)
    with data(app):
        for i in range(5):
            f.simple_conversation(project_id, f"plain-{i}", at=now - timedelta(minutes=i))
        f.support_conversation(project_id, "support", title="Refund please")
        percent = f.conversation(project_id, "percent", at=now - timedelta(hours=1))
        f.message(percent, "percent-u", "user", "Is 50% off right?", at=now - timedelta(hours=1))
        five_hundred = f.conversation(project_id, "five-hundred", at=now - timedelta(hours=2))
        f.message(five_hundred, "500-u", "user", "I paid 500 dollars", at=now - timedelta(hours=2))


def test_the_api_and_the_json_twin_list_the_same_pages(app, client, project_key):
    seed(app, project_key.project_id)
    logged_in(app, client, project_key)
    api_page, api_cursor = api_ids(client, project_key, limit=3)
    twin_page, twin_cursor = twin_ids(client, limit=3)
    assert api_page == twin_page and len(api_page) == 3
    assert api_cursor == twin_cursor is not None
    # One cursor format: either list continues from the other's cursor.
    assert api_ids(client, project_key, limit=3, cursor=twin_cursor) == twin_ids(
        client, limit=3, cursor=api_cursor
    )


def test_the_api_and_the_json_twin_search_alike(app, client, project_key):
    seed(app, project_key.project_id)
    logged_in(app, client, project_key)
    for q, expected in [
        ("refund", ["support"]),  # title
        ("other order #1043", ["support"]),  # message text
        ("create_ticket", ["support"]),  # tool name
        ("50%", ["percent"]),  # % is a character, not a wildcard
        ("  PLAIN-1  ", ["plain-1"]),  # id, any case, spaces around ignored
    ]:
        assert api_ids(client, project_key, q=q)[0] == expected, q
        assert twin_ids(client, q=q)[0] == expected, q


def test_a_cursor_of_the_former_api_format_is_refused_clearly(app, client, project_key):
    seed(app, project_key.project_id)
    old = base64.urlsafe_b64encode(b"2026-03-10T09:30:00+00:00|5").decode().rstrip("=")
    response = client.get(API, query_string={"cursor": old}, headers=project_key.headers)
    # Well formed (URL-safe base64), so it names a page that is not there, as an unknown id does.
    assert_error(response, 404, "not_found", field="query.cursor")


def test_the_freshness_window_is_the_channels_else_the_projects(app, project_key):
    pid = project_key.project_id
    with data(app):
        db.session.get(Project, pid).freshness_seconds = 300
        f.channel(pid, "instant", freshness_seconds=0)
        f.channel(pid, "inherits")
        f.conversation(pid, "c-instant", channel_name="instant")
        f.conversation(pid, "c-inherits", channel_name="inherits")
        f.conversation(pid, "c-none")
    with app.app_context():
        names = ("c-instant", "c-inherits", "c-none")
        ids = [find_conversation(pid, external_id=name).id for name in names]
        windows = {c.external_id: c.freshness_seconds for c in find_conversations(pid, ids)}
        assert windows == {"c-instant": 0, "c-inherits": 300, "c-none": 300}
        db.session.get(Project, pid).freshness_seconds = None
        db.session.commit()
        assert find_conversation(pid, external_id="c-none").freshness_seconds is None
        assert find_conversation(pid, external_id="c-instant").freshness_seconds == 0


def test_the_replay_page_twin_and_the_api_give_the_same_document(app, client, project_key):
    with data(app):
        row_id = f.support_conversation(project_key.project_id, "support").id
    logged_in(app, client, project_key)
    params = {"format": "anthropic", "freshness": "off", "as_of": "2030-01-01T00:00:00Z"}
    api = client.get(f"{API}/support/replay", query_string=params, headers=project_key.headers)
    twin = client.get(f"/conversations/{row_id}/replay.json", query_string=params)
    assert api.status_code == twin.status_code == 200
    assert api.get_json() == twin.get_json()
