"""Redaction happens before storage: secrets never reach the database (checked in raw rows)."""

from __future__ import annotations

import json

import pytest
from api_support import native_call, raw_rows, tool_item

SECRETS = {
    "email": "jane.doe@example.com",
    "api_key": "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.payload.signature",
    "card": "4111 1111 1111 1111",
    "ssn": "123-45-6789",
}


@pytest.fixture
def rules(client, project_key):
    h = project_key.headers
    for body in (
        {"name": "pii", "kind": "mask", "value": ["email", "api_key", "bearer", "card"]},
        {
            "name": "crm-ssn",
            "kind": "redact_paths",
            "value": ["customer.ssn", "*.ssn"],
            "function_name": "crm_*",
        },
        {"name": "no-debug", "kind": "skip", "function_name": "debug_*"},
    ):
        assert client.post("/api/v1/redaction-rules", json=body, headers=h).status_code == 201


def _dump_database(app) -> str:
    """Every text column of the tables that hold agent data, as one string."""
    rows = raw_rows(app, "SELECT * FROM tool_invocation") + raw_rows(app, "SELECT * FROM message")
    return "\n".join(repr(row) for row in rows)


def test_secrets_in_message_tool_posts_never_reach_the_database(app, client, project_key, rules):
    tools = [
        tool_item(
            0,
            0,
            name="send_mail",
            arguments={"to": SECRETS["email"], "auth": f"Bearer {SECRETS['bearer']}"},
            response=f"sent with key {SECRETS['api_key']}",
        ),
        tool_item(
            0,
            1,
            name="crm_lookup",
            arguments={"customer": {"ssn": SECRETS["ssn"]}},
            response=f'[{{"ssn": "{SECRETS["ssn"]}", "card": "{SECRETS["card"]}"}}]',
        ),
        tool_item(
            0, 2, name="debug_dump", arguments={"env": SECRETS["api_key"]}, response="everything"
        ),
    ]
    response = client.post(
        "/api/v1/messages/tools",
        json={"messageId": "m1", "tools": tools},
        headers=project_key.headers,
    )
    assert response.status_code == 201
    data = response.get_json()["data"]
    # The skipped tool is not stored, so the answer leaves it out too.
    assert [t["functionName"] for t in data] == ["send_mail", "crm_lookup"]
    assert data[0]["arguments"]["to"] == "[REDACTED:email]"

    stored = _dump_database(app)
    for secret in SECRETS.values():
        assert secret not in stored
    assert "debug_dump" not in stored
    assert raw_rows(app, "SELECT COUNT(*) FROM tool_invocation") == [(2,)]


def test_stored_calls_list_the_rules_that_changed_them(client, project_key, rules):
    client.post(
        "/api/v1/conversations/c1/messages",
        json={
            "messages": [
                {
                    "id": "a1",
                    "role": "assistant",
                    "tool_calls": [
                        native_call(
                            0,
                            0,
                            name="crm_lookup",
                            arguments={"customer": {"ssn": "1"}},
                            response=f"mail {SECRETS['email']}",
                        ),
                        native_call(
                            0, 1, name="search", arguments={"q": "weather"}, response="sunny"
                        ),
                    ],
                }
            ]
        },
        headers=project_key.headers,
    )
    calls = client.get("/api/v1/conversations/c1", headers=project_key.headers).get_json()[
        "messages"
    ][0]["tool_calls"]
    assert calls[0]["redacted"] == ["crm-ssn", "pii"]
    assert calls[1]["redacted"] is None


def test_a_retry_of_a_redacted_call_is_still_idempotent(app, client, project_key, rules):
    tools = [tool_item(0, 0, arguments={"to": SECRETS["email"]})]
    body = {"messageId": "m1", "tools": tools}
    first = client.post("/api/v1/messages/tools", json=body, headers=project_key.headers)
    # The response arrives later and carries a secret of its own.
    tools_with_response = [
        tool_item(0, 0, arguments={"to": SECRETS["email"]}, response=f"key {SECRETS['api_key']}")
    ]
    second = client.post(
        "/api/v1/messages/tools",
        headers=project_key.headers,
        json={"messageId": "m1", "tools": tools_with_response},
    )
    again = client.post(
        "/api/v1/messages/tools",
        headers=project_key.headers,
        json={"messageId": "m1", "tools": tools_with_response},
    )
    assert first.status_code == second.status_code == again.status_code == 201
    assert second.get_json() == again.get_json()
    assert second.get_json()["data"][0]["response"]["content"] == "key [REDACTED:api_key]"
    assert SECRETS["api_key"] not in _dump_database(app)


def test_disabled_rules_and_other_projects_rules_do_not_apply(
    client, project_key, other_project_key, rules
):
    h = other_project_key.headers
    disabled = {"name": "off", "kind": "mask", "value": ["email"], "enabled": False}
    assert client.post("/api/v1/redaction-rules", json=disabled, headers=h).status_code == 201
    body = {"messageId": "m1", "tools": [tool_item(arguments={"to": SECRETS["email"]})]}
    stored = client.post("/api/v1/messages/tools", json=body, headers=h).get_json()
    assert stored["data"][0]["arguments"] == {"to": SECRETS["email"]}


def test_imports_are_redacted_too(app, client, project_key, rules):
    client.post(
        "/api/v1/conversations/c1/import",
        json={
            "format": "openai-chat",
            "messages": [
                {"role": "user", "content": "mail me"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {
                                "name": "send_mail",
                                "arguments": f'{{"to": "{SECRETS["email"]}"}}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "t1", "content": f"sent to {SECRETS['email']}"},
            ],
        },
        headers=project_key.headers,
    )
    assert SECRETS["email"] not in _dump_database(app)


def test_addresses_in_keys_and_json_escapes_never_reach_the_database(
    app, client, project_key, rules
):
    address = SECRETS["email"]
    escaped = address.replace("@", "\\u0040")
    tools = [
        tool_item(
            0,
            0,
            name="lookup",
            arguments={"contacts": {address: "primary"}, "raw": f'{{"to": "{escaped}"}}'},
            response=f'{{"{escaped}": {{"owner": "{escaped}"}}, "ok": true}}',
        )
    ]
    response = client.post(
        "/api/v1/messages/tools",
        json={"messageId": "m1", "tools": tools},
        headers=project_key.headers,
    )
    assert response.status_code == 201
    stored = _dump_database(app)
    for spelling in (address, escaped, address.split("@")[0]):
        assert spelling not in stored
    (call,) = response.get_json()["data"]
    assert call["arguments"]["contacts"] == {"[REDACTED:email]": "primary"}
    assert json.loads(call["response"]["content"]) == {
        "[REDACTED:email]": {"owner": "[REDACTED:email]"},
        "ok": True,
    }
