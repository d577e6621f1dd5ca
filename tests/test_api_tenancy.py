"""A key of project A never reads or writes project B's data, whatever endpoint it uses."""

from __future__ import annotations

import pytest
from api_support import native_call, raw_rows, tool_item

# Project B ("other") owns conversation "shared", message "b-msg" and a redaction rule.


@pytest.fixture
def b_data(client, other_project_key):
    h = other_project_key.headers
    client.put("/api/v1/conversations/shared", json={"title": "B's secret"}, headers=h)
    client.post(
        "/api/v1/conversations/shared/messages",
        json={
            "messages": [
                {
                    "id": "b-msg",
                    "role": "assistant",
                    "content": "B only",
                    "tool_calls": [native_call(response="B result")],
                }
            ]
        },
        headers=h,
    )
    rule = client.post(
        "/api/v1/redaction-rules",
        json={"name": "b-rule", "kind": "mask", "value": ["email"]},
        headers=h,
    )
    client.put("/api/v1/channels/b-channel", json={"freshness_seconds": 5}, headers=h)
    return {"rule_id": rule.get_json()["id"]}


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/conversations",
        "/api/v1/messages/tools?messageIds=b-msg",
        "/api/v1/channels",
        "/api/v1/redaction-rules",
    ],
)
def test_lists_show_only_the_key_holders_data(client, project_key, b_data, url):
    response = client.get(url, headers=project_key.headers)
    assert response.status_code == 200
    assert response.get_json()["data"] == []


def test_another_projects_conversation_is_404(client, project_key, b_data):
    response = client.get("/api/v1/conversations/shared", headers=project_key.headers)
    assert response.status_code == 404
    assert "B's secret" not in response.get_data(as_text=True)


def test_another_projects_rule_cannot_be_deleted(client, project_key, other_project_key, b_data):
    url = f"/api/v1/redaction-rules/{b_data['rule_id']}"
    assert client.delete(url, headers=project_key.headers).status_code == 404
    rules = client.get("/api/v1/redaction-rules", headers=other_project_key.headers).get_json()
    assert [r["name"] for r in rules["data"]] == ["b-rule"]


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        (
            "post",
            "/api/v1/messages/tools",
            {"messageId": "b-msg", "tools": [tool_item(0, 0, response="A result")]},
        ),
        ("put", "/api/v1/conversations/shared", {"title": "A's title"}),
        (
            "post",
            "/api/v1/conversations/shared/messages",
            {"messages": [{"id": "b-msg", "role": "assistant", "content": "A says"}]},
        ),
        (
            "post",
            "/api/v1/conversations/shared/turns",
            {"assistant": {"id": "b-msg", "content": "A says"}},
        ),
        (
            "post",
            "/api/v1/conversations/shared/messages/b-msg/rounds/0",
            {"calls": [{"id": "x", "name": "search"}]},
        ),
        (
            "post",
            "/api/v1/conversations/shared/import",
            {"format": "openai-chat", "messages": [{"role": "user", "content": "A"}]},
        ),
        ("put", "/api/v1/channels/b-channel", {"freshness_seconds": 999}),
    ],
)
def test_writes_with_the_same_ids_land_in_the_writers_own_project(
    app, client, project_key, other_project_key, b_data, method, url, body
):
    b_conversations = (
        "SELECT project_id, external_id, title, updated_at FROM conversation "
        f"WHERE project_id = {other_project_key.project_id}"
    )
    before = raw_rows(app, b_conversations)
    response = client.open(url, method=method, json=body, headers=project_key.headers)
    assert response.status_code in (200, 201), response.get_data(as_text=True)

    # Project B sees exactly what it had.
    h = other_project_key.headers
    conversation = client.get("/api/v1/conversations/shared", headers=h).get_json()
    assert conversation["title"] == "B's secret"
    (message,) = conversation["messages"]
    assert message["content"] == "B only"
    assert [c["response"]["content"] for c in message["tool_calls"]] == ["B result"]
    channels = client.get("/api/v1/channels", headers=h).get_json()["data"]
    assert [(c["name"], c["freshness_seconds"]) for c in channels] == [("b-channel", 5)]
    assert raw_rows(app, b_conversations) == before
    b_calls = raw_rows(
        app,
        f"SELECT COUNT(*) FROM tool_invocation WHERE project_id = {other_project_key.project_id}",
    )
    assert b_calls == [(1,)]
