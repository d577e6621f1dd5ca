"""Hostile JSON in a tool result or in imported arguments never breaks a page, a replay, the
costs, or ingestion: it is stored and shown as the text it is (issue 13, defect 1)."""

from __future__ import annotations

import itertools
from typing import Any

from dashboard_support import dashboard_fixture  # noqa: F401
from hostile_json import deep_array, hostile_json_text, sources_list
from hypothesis import HealthCheck, given, settings
from sqlalchemy import select

from webapp.db import db
from webapp.models import Conversation, Message, ToolInvocation

FORMATS = ("openai-chat", "openai-responses", "anthropic")
_ids = itertools.count()


def _ingest(client, headers: dict[str, str], text: str, arguments: Any = None) -> str:
    """A conversation whose tool result is `text` (and arguments `arguments`), plus an import
    whose arguments are `text`. Returns the conversation's external id."""
    cid = f"hostile-{next(_ids)}"
    turn = {
        "user": {"id": f"{cid}-u", "content": "look it up"},
        "assistant": {
            "id": f"{cid}-a",
            "content": "done",
            "model": "gpt-4o",
            "rounds": [
                {
                    "usage": {"input_tokens": 10, "output_tokens": 2},
                    "calls": [
                        {
                            "id": "c1",
                            "name": "search",
                            "arguments": arguments or {"q": "x"},
                            "response": {"content": text},
                        }
                    ],
                }
            ],
        },
    }
    stored = client.post(f"/api/v1/conversations/{cid}/turns", json=turn, headers=headers)
    assert stored.status_code == 201, stored.get_data(as_text=True)[:500]
    imported = client.post(
        f"/api/v1/conversations/{cid}-imp/import",
        json={
            "format": "openai-chat",
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "t1",
                            "type": "function",
                            "function": {"name": "search", "arguments": text},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "t1", "content": text},
                {"role": "assistant", "content": "ok"},
            ],
        },
        headers=headers,
    )
    assert imported.status_code == 201, imported.get_data(as_text=True)[:500]
    return cid


def _surfaces(app, cid: str) -> list[str]:
    with app.app_context():
        conv_ids = db.session.scalars(
            select(Conversation.id).where(Conversation.external_id.in_([cid, f"{cid}-imp"]))
        ).all()
        call_ids = db.session.scalars(
            select(ToolInvocation.id)
            .join(Message, Message.id == ToolInvocation.message_id)
            .where(Message.conversation_id.in_(conv_ids))
        ).all()
    urls = ["/costs", "/costs.json", "/tools", "/tools.json", "/conversations"]
    for conv in conv_ids:
        base = f"/conversations/{conv}"
        urls += [base, f"{base}.json", f"{base}/charts", f"{base}/charts.json"]
        for fmt in FORMATS:
            query = f"?format={fmt}"
            urls += [
                f"{base}/replay{query}",
                f"{base}/replay.json{query}",
                f"{base}/replay/payload.json{query}",
                f"{base}/replay/download{query}",
                f"{base}/replay/compare{query}",
            ]
    for call in call_ids:
        urls += [f"/calls/{call}", f"/calls/{call}.json", f"/calls/{call}/response"]
        urls += [f"/calls/{call}/arguments", f"/calls/{call}/response.txt"]
    for ext in (cid, f"{cid}-imp"):
        urls.append(f"/api/v1/conversations/{ext}")
        urls += [f"/api/v1/conversations/{ext}/replay?format={fmt}" for fmt in FORMATS]
    return urls


def _assert_every_surface_answers(app, dashboard, headers: dict[str, str], cid: str) -> None:
    for url in _surfaces(app, cid):
        api = url.startswith("/api/")
        response = dashboard.get(url, headers=headers if api else {})
        assert response.status_code < 500, (url, response.get_data(as_text=True)[:300])


def _with_redact_paths_rule(dashboard, headers: dict[str, Any]) -> None:
    rule = {"name": "paths", "kind": "redact_paths", "value": ["$.a", "$.content"]}
    created = dashboard.post("/api/v1/redaction-rules", json=rule, headers=headers)
    assert created.status_code == 201, created.get_data(as_text=True)


def test_a_deeply_nested_result_is_shown_as_text_everywhere(app, dashboard, project_key):
    _with_redact_paths_rule(dashboard, project_key.headers)
    for text in (deep_array(5000), sources_list(deep_array(5000))):
        cid = _ingest(dashboard, project_key.headers, text)
        _assert_every_surface_answers(app, dashboard, project_key.headers, cid)


def test_arguments_nested_as_deep_as_a_body_may_be_are_shown(app, dashboard, project_key):
    """A request body may nest 200 levels (deeper is a 400); arguments nested almost that deep
    are stored, and every page, twin and replay shows them."""
    arguments: dict[str, Any] = {"leaf": "x"}
    for _ in range(185):
        arguments = {"a": arguments}
    _with_redact_paths_rule(dashboard, project_key.headers)
    cid = _ingest(dashboard, project_key.headers, "ok", arguments)
    _assert_every_surface_answers(app, dashboard, project_key.headers, cid)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=hostile_json_text)
def test_hostile_json_never_breaks_a_surface(app, dashboard, project_key, text):
    cid = _ingest(dashboard, project_key.headers, text)
    _assert_every_surface_answers(app, dashboard, project_key.headers, cid)
