"""The replay loader reads its rows as the driver's own tuples (``histories._tuples``), skipping
SQLAlchemy's rows and their result processing. That is right only while each select's columns
need no processing: these tests compare the tuples with SQLAlchemy's rows for every select the
loaders run, and check the one kind of column that does differ (SQLite's 0/1 booleans) arrives in
the history as ``bool``. On SQLite and PostgreSQL (the ``app`` fixture).
"""

from __future__ import annotations

import pytest

from webapp.db import db
from webapp.ingest.token_pass import MESSAGES, count_pending
from webapp.queries import histories
from webapp.queries.conversations import find_conversation
from webapp.replay import ReplayOptions, replay

BASE = "/api/v1/conversations"


def _store(app, client, key) -> None:
    turn = {
        "user": {"id": "u1", "content": "Look it up", "created_at": "2026-01-01T00:00:00Z"},
        "assistant": {
            "id": "a1",
            "content": "Not found.",
            "created_at": "2026-01-01T00:00:01Z",
            "usage": [{"round_index": 0, "model": "gpt-4o", "input_tokens": 10}],
            "rounds": [
                {
                    "calls": [
                        {
                            "id": "call_1",
                            "name": "lookup",
                            "arguments": {"q": "x", "n": 1.5},
                            "response": {"content": "boom", "is_error": True},
                        },
                        {
                            "id": "call_2",
                            "name": "lookup",
                            "arguments": None,
                            "response": {"content": "ok"},
                        },
                    ]
                }
            ],
        },
    }
    assert client.post(f"{BASE}/c1/turns", json=turn, headers=key.headers).status_code == 201
    imported = {
        "format": "openai-chat",
        "messages": [
            {"role": "user", "content": "Again"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "tc_1", "type": "function",
                 "function": {"name": "lookup", "arguments": "{\"q\": \"y\"}"}}]},
            {"role": "tool", "tool_call_id": "tc_1", "content": "found"},
            {"role": "assistant", "content": "Found it."},
        ],
    }  # fmt: skip
    assert client.post(f"{BASE}/c2/import", json=imported, headers=key.headers).status_code == 201
    with app.app_context():
        count_pending()
        count_pending(kind=MESSAGES)
        db.session.remove()


@pytest.mark.parametrize("tokens", ["text", "row", None])
def test_every_select_reads_as_sqlalchemys_rows(app, client, project_key, monkeypatch, tokens):
    _store(app, client, project_key)
    statements = []
    tuples = histories._tuples

    def recorded(statement):
        statements.append(statement)
        return tuples(statement)

    monkeypatch.setattr(histories, "_tuples", recorded)
    with app.app_context():
        conversations = [
            find_conversation(project_key.project_id, external_id=cid) for cid in ("c1", "c2")
        ]
        histories.load_histories(conversations, tokens=tokens)
        # messages, tool calls, and the service calls unless the costs come with them
        assert len(statements) == (2 if tokens == "row" else 3)
        for statement in statements:
            raw = tuples(statement)
            processed = [tuple(row) for row in histories._rows(statement).all()]
            assert raw and raw == processed  # 0 == False: only the booleans' types may differ
            for a, b in zip(raw, processed, strict=True):
                for x, y in zip(a, b, strict=True):
                    assert type(x) is type(y) or {type(x), type(y)} == {int, bool}
        db.session.remove()


def test_booleans_reach_the_history_as_bool(app, client, project_key):
    _store(app, client, project_key)
    with app.app_context():
        loaded = {
            cid: histories.load_history(find_conversation(project_key.project_id, external_id=cid))
            for cid in ("c1", "c2")
        }
        calls = [c for m in loaded["c1"].history.messages for c in m.tool_calls]
        assert [(c.external_id, c.is_error) for c in calls] == [("call_1", True), ("call_2", False)]
        assert all(type(c.is_error) is bool for c in calls)
        messages = loaded["c2"].history.messages
        assert [(m.role, m.imported) for m in messages] == [("user", True), ("assistant", True)]
        assert all(type(m.imported) is bool for m in messages)
        assert {type(m.imported) for m in loaded["c1"].history.messages} == {bool}
        # The replay sends the error flag as JSON true, never as 1.
        payload = replay(loaded["c1"].history, ReplayOptions(format="anthropic")).payload
        results = [
            block
            for message in payload["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        assert [r.get("is_error") for r in results] == [True, None]
        db.session.remove()
