"""Deleting one conversation — from its page (confirmation, CSRF), the API (204/404, all or
nothing) and the CLI — removes its messages, calls, usage, search index rows and the OTLP data
projected into it, and nothing of any other conversation."""

from __future__ import annotations

from urllib.parse import quote

import factories as f
from api_support import raw_rows, row_counts
from dashboard_support import csrf_token, dashboard_fixture, data, page  # noqa: F401
from otlp_support import agent_run, traces_json
from sqlalchemy import delete
from test_storage_call_search_sync import assert_index_in_step, found

from webapp.cli import main
from webapp.db import db
from webapp.models import Message

OTEL_TABLES = ("otel_span", "otel_log", "otel_link", "otel_turn", "otel_turn_trace")


def otel_counts(app) -> dict[str, int]:
    return {t: raw_rows(app, f"SELECT COUNT(*) FROM {t}")[0][0] for t in OTEL_TABLES}


def two_conversations(app, project_id: int) -> dict[str, int]:
    with data(app):
        keep = f.support_conversation(project_id, "keep-me")
        gone = f.support_conversation(project_id, "x y?#%")
        return {"keep": keep.id, "gone": gone.id}


def test_api_delete_removes_everything_of_that_conversation_only(app, client, project_key):
    two_conversations(app, project_key.project_id)
    before = row_counts(app)
    assert found(app, project_key.project_id, "refund policy") == ["search_kb", "search_kb"]
    url = "/api/v1/conversations/" + quote("x y?#%", safe="")
    response = client.delete(url, headers=project_key.headers)
    assert response.status_code == 204, response.data[:300]
    after = row_counts(app)
    for table in ("conversation", "message", "tool_invocation", "service_call"):
        assert after[table] * 2 == before[table], table
    assert found(app, project_key.project_id, "refund policy") == ["search_kb"]
    assert_index_in_step(app)
    assert client.get(url, headers=project_key.headers).status_code == 404
    again = client.delete(url, headers=project_key.headers)
    assert again.status_code == 404
    assert again.get_json()["error"]["code"]
    assert (
        client.get("/api/v1/conversations/keep-me", headers=project_key.headers).status_code == 200
    )


def test_api_delete_is_per_project_and_needs_a_key(app, client, project_key, other_project_key):
    two_conversations(app, other_project_key.project_id)
    before = row_counts(app)
    assert client.delete("/api/v1/conversations/keep-me").status_code == 401
    response = client.delete("/api/v1/conversations/keep-me", headers=project_key.headers)
    assert response.status_code == 404
    assert row_counts(app) == before


def test_api_delete_writes_nothing_when_it_fails(app, client, project_key, monkeypatch):
    two_conversations(app, project_key.project_id)
    before = row_counts(app)
    import webapp.ingest.deletes as deletes

    original = deletes.delete_raw_of

    def failing(selected):
        # Half-way: the raw rows and the messages are gone when the failure strikes.
        original(selected)
        db.session.execute(delete(Message).where(Message.conversation_id.in_(selected)))
        raise RuntimeError("disk full")

    monkeypatch.setattr(deletes, "delete_raw_of", failing)
    response = client.delete("/api/v1/conversations/keep-me", headers=project_key.headers)
    assert response.status_code == 500
    assert row_counts(app) == before
    assert otel_counts(app) == dict.fromkeys(OTEL_TABLES, 0)


def test_delete_removes_the_otlp_data_projected_into_it(app, client, project_key):
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {project_key.key}"}
    for trace, cid in ((1, "otel-a"), (2, "otel-b")):
        run = agent_run(trace, conversation=cid)
        response = client.post("/v1/traces", data=traces_json(run.spans), headers=headers)
        assert response.status_code == 200, response.data[:300]
    before = otel_counts(app)
    assert all(before[t] for t in ("otel_span", "otel_link", "otel_turn", "otel_turn_trace"))
    response = client.delete("/api/v1/conversations/otel-a", headers=project_key.headers)
    assert response.status_code == 204
    after = otel_counts(app)
    for table in ("otel_span", "otel_turn", "otel_turn_trace"):
        assert 0 < after[table] < before[table], (table, before, after)
    spans = raw_rows(app, "SELECT DISTINCT trace_id FROM otel_span")
    assert len(spans) == 1
    assert (
        client.get("/api/v1/conversations/otel-b", headers=project_key.headers).status_code == 200
    )
    assert (
        client.delete("/api/v1/conversations/otel-b", headers=project_key.headers).status_code
        == 204
    )
    assert otel_counts(app) == dict.fromkeys(OTEL_TABLES, 0)


def test_the_page_asks_first_and_posts_with_csrf(app, dashboard, project_key):
    ids = two_conversations(app, project_key.project_id)
    doc = page(dashboard.get(f"/conversations/{ids['gone']}"))
    box = doc.one("details.confirm-delete")
    assert "cannot be undone" in box.text
    form = box.one("form")
    assert form.get("action") == f"/conversations/{ids['gone']}/delete"
    assert form.select("input[name=csrf_token]")
    before = row_counts(app)
    # Without the CSRF token: refused, nothing deleted.
    assert dashboard.post(f"/conversations/{ids['gone']}/delete").status_code == 400
    assert row_counts(app) == before
    token = csrf_token(dashboard)
    response = dashboard.post(f"/conversations/{ids['gone']}/delete", data={"csrf_token": token})
    assert response.status_code == 303
    assert response.headers["Location"] == "/conversations?deleted=1"
    assert dashboard.get(f"/conversations/{ids['gone']}").status_code == 404
    listing = page(dashboard.get("/conversations?deleted=1"))
    assert "was deleted" in listing.one(".notice").text
    assert [r.get("id") for r in listing.select("#conv-rows tr[id]")] == [f"conv-{ids['keep']}"]
    again = dashboard.post(f"/conversations/{ids['gone']}/delete", data={"csrf_token": token})
    assert again.status_code == 404


def test_the_cli_deletes_by_project_and_conversation_id(app, runner, project_key):
    two_conversations(app, project_key.project_id)
    result = runner.invoke(main, ["conversations", "delete", "default", "nope", "--yes"])
    assert result.exit_code != 0 and "no conversation 'nope'" in result.output
    result = runner.invoke(main, ["conversations", "delete", "default", "keep-me"], input="n\n")
    assert result.exit_code != 0
    assert row_counts(app)["conversation"] == 2
    result = runner.invoke(main, ["conversations", "delete", "default", "keep-me", "--yes"])
    assert result.exit_code == 0, result.output
    assert "deleted conversation 'keep-me'" in result.output
    assert row_counts(app)["conversation"] == 1
    assert_index_in_step(app)
