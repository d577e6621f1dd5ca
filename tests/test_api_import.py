"""POST /conversations/{cid}/import: a provider message list becomes a conversation, and a
replay of it gives the same list back."""

from __future__ import annotations

import copy

import pytest
from api_support import assert_error, row_counts
from sqlalchemy import select

from webapp.db import db
from webapp.models import Conversation
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import load_history
from webapp.replay import ReplayOptions, replay

CHAT = {
    "messages": [
        {"role": "system", "content": "You onboard vendors."},
        {"role": "user", "content": "Onboard TechCorp"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "tc_01",
                    "type": "function",
                    "function": {"name": "vendor_lookup", "arguments": '{"name":"TechCorp"}'},
                },
                {
                    "id": "tc_02",
                    "type": "function",
                    "function": {"name": "credit_check", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "tc_01", "content": '{"result": null}'},
        {"role": "tool", "tool_call_id": "tc_02", "content": "AA"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "tc_03",
                    "type": "function",
                    "function": {"name": "vendor_create", "arguments": '{"name":"TechCorp"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "tc_03", "content": "created"},
        {"role": "assistant", "content": "TechCorp is onboarded."},
        {"role": "user", "content": "Thanks"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "vendor_lookup",
                "description": "Find a vendor",
                "parameters": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        }
    ],
}

RESPONSES = {
    "instructions": "You onboard vendors.",
    "input": [
        {"role": "user", "content": "Onboard TechCorp"},
        {
            "type": "function_call",
            "call_id": "tc_01",
            "name": "vendor_lookup",
            "arguments": '{"name":"TechCorp"}',
        },
        {"type": "function_call_output", "call_id": "tc_01", "output": "none"},
        {"role": "assistant", "content": "Not found."},
        {"role": "user", "content": "Create it"},
    ],
}

ANTHROPIC = {
    "system": "You onboard vendors.",
    "messages": [
        {"role": "user", "content": "Onboard TechCorp"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "tc_01",
                    "name": "vendor_lookup",
                    "input": {"name": "TechCorp"},
                },
                {"type": "tool_use", "id": "tc_02", "name": "credit_check", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tc_01", "content": "none"},
                {
                    "type": "tool_result",
                    "tool_use_id": "tc_02",
                    "content": "failed",
                    "is_error": True,
                },
            ],
        },
        {"role": "assistant", "content": "TechCorp is not in the system yet."},
        {"role": "user", "content": "Create it"},
    ],
}

PAYLOADS = {"openai-chat": CHAT, "openai-responses": RESPONSES, "anthropic": ANTHROPIC}


def import_payload(client, key, cid, fmt, payload, **extra):
    body = {"format": fmt, **copy.deepcopy(payload), **extra}
    return client.post(f"/api/v1/conversations/{cid}/import", json=body, headers=key.headers)


def replay_payload(app, cid: str, fmt: str) -> dict:
    with app.app_context():
        project_id = db.session.scalar(
            select(Conversation.project_id).where(Conversation.external_id == cid)
        )
        conversation = find_conversation(project_id, external_id=cid)
        history = load_history(conversation).history
        options = ReplayOptions(
            format=fmt, freshness_seconds=None, compact_sources=False, trim_trailing=False
        )
        return replay(history, options).payload


def test_import_derives_turns_rounds_and_sequences(client, project_key):
    response = import_payload(
        client, project_key, "c1", "openai-chat", CHAT, started_at="2026-03-10T09:00:00Z"
    )
    assert response.status_code == 201
    conversation = response.get_json()
    assert conversation["system_prompt"] == "You onboard vendors."
    assert [t["name"] for t in conversation["tools"]] == ["vendor_lookup"]
    user, assistant, thanks = conversation["messages"]
    assert user["created_at"] == "2026-03-10T09:00:00Z"
    assert assistant["content"] == "TechCorp is onboarded."
    assert [(c["id"], c["round_index"], c["sequence_index"]) for c in assistant["tool_calls"]] == [
        ("tc_01", 0, 0),
        ("tc_02", 0, 1),
        ("tc_03", 1, 0),
    ]
    assert assistant["tool_calls"][0]["arguments"] == {"name": "TechCorp"}
    assert thanks["content"] == "Thanks"


def test_importing_the_same_list_again_changes_nothing(app, client, project_key):
    first = import_payload(client, project_key, "c1", "anthropic", ANTHROPIC).get_json()
    before = row_counts(app)
    again = import_payload(client, project_key, "c1", "anthropic", ANTHROPIC)
    assert again.status_code == 201
    assert row_counts(app) == before
    assert [m["id"] for m in again.get_json()["messages"]] == [m["id"] for m in first["messages"]]


def test_the_same_list_imports_into_two_conversations_without_clashing(client, project_key):
    assert import_payload(client, project_key, "c1", "openai-chat", CHAT).status_code == 201
    assert import_payload(client, project_key, "c2", "openai-chat", CHAT).status_code == 201


def test_a_longer_version_of_an_imported_list_appends(app, client, project_key):
    shorter = {"messages": CHAT["messages"][:-1]}
    import_payload(client, project_key, "c1", "openai-chat", shorter)
    longer = import_payload(client, project_key, "c1", "openai-chat", CHAT).get_json()
    assert longer["messages"][-1]["content"] == "Thanks"
    assert row_counts(app)["message"] == 3


def test_an_unreadable_list_is_422_naming_the_item_and_writes_nothing(app, client, project_key):
    bad = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "ghost", "content": "?"},
        ]
    }
    body = assert_error(
        import_payload(client, project_key, "c1", "openai-chat", bad),
        422,
        "invalid",
        field="messages.1",
    )
    assert "ghost" in body["message"]
    assert sum(row_counts(app).values()) == 0


def test_an_unknown_format_is_422(client, project_key):
    response = import_payload(client, project_key, "c1", "gemini", {"messages": []})
    assert_error(response, 422, "invalid", field="format")


@pytest.mark.parametrize("fmt", list(PAYLOADS))
def test_a_replay_of_an_imported_list_gives_the_list_back(app, client, project_key, fmt):
    payload = PAYLOADS[fmt]
    assert import_payload(client, project_key, "c1", fmt, payload).status_code == 201
    assert replay_payload(app, "c1", fmt) == payload


@pytest.mark.parametrize("via", ["openai-responses", "anthropic"])
def test_importing_a_replay_export_recreates_an_equivalent_conversation(
    app, client, project_key, via
):
    """chat → stored → exported in another format → imported → exported as chat again."""
    import_payload(client, project_key, "original", "openai-chat", CHAT)
    exported = replay_payload(app, "original", via)
    assert import_payload(client, project_key, "copy", via, exported).status_code == 201
    assert replay_payload(app, "copy", "openai-chat") == replay_payload(
        app, "original", "openai-chat"
    )
