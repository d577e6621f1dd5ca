"""Export → import → export through the API and the database (issue 12): generated histories
stored as rows, exported with random options, imported back, exported again; the import's
timestamps; the cases the issue reproduced. On SQLite and PostgreSQL (the ``app`` fixture)."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from webapp.db import db
from webapp.ingest import replace_tool_definitions
from webapp.models import Conversation, Message, ToolInvocation
from webapp.models import ServiceCall as ServiceCallRow
from webapp.replay import FORMATS, History, ReplayOptions
from webapp.replay.build import latest_moment, sorted_messages

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import histories, options
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import histories, options

BASE = "/api/v1/conversations"
# Each example stores, exports, imports and exports twice over HTTP: fewer than the pure
# property (tests/test_replay_round_trip.py), on both databases.
API_ROUND_TRIP_EXAMPLES = 60
_cids = itertools.count()


def _clean(text: str | None) -> str | None:
    """As ingestion stores text (PostgreSQL cannot hold NUL)."""
    return None if text is None else text.replace("\x00", "\ufffd")


def store_history(project_id: int, cid: str, h: History) -> None:
    """The history's rows, written as they are (no token counts: the replay counts them, as it
    counts the copy's at ingestion, with the same tokenizer)."""
    conv = Conversation(project_id=project_id, external_id=cid, system_prompt=h.system_prompt)
    db.session.add(conv)
    db.session.flush()
    for m in h.messages:
        row = Message(
            project_id=project_id,
            external_id=f"{cid}-{m.external_id}",
            conversation_id=conv.id,
            role=m.role,
            content=_clean(m.content),
            created_at=m.created_at,
            status=(m.status or "completed") if m.role == "assistant" else None,
            model=m.model,
            imported=m.imported,
        )
        db.session.add(row)
        db.session.flush()
        for c in m.tool_calls:
            db.session.add(
                ToolInvocation(
                    project_id=project_id,
                    message_id=row.id,
                    round_index=c.round_index,
                    sequence_index=c.sequence_index,
                    external_tool_call_id=c.external_id,
                    function_name=c.function_name,
                    arguments=c.arguments,
                    created_at=c.created_at,
                    response=_clean(c.response),
                    response_created_at=c.response_created_at,
                    is_error=c.is_error,
                    redactions=["test"] if c.redacted else None,
                )
            )
        for s in m.service_calls:
            db.session.add(
                ServiceCallRow(
                    message_id=row.id,
                    round_index=s.round_index,
                    model=s.model,
                    created_at=s.created_at,
                )
            )
    seen: dict[str, dict[str, Any]] = {}
    for t in h.tool_definitions:
        seen.setdefault(
            t.name, {"name": t.name, "description": t.description, "parameters": t.parameters}
        )
    replace_tool_definitions(conv.id, list(seen.values()))
    db.session.commit()


def query_of(o: ReplayOptions, as_of: str) -> dict[str, str]:
    params = {
        "format": o.format,
        "as_of": as_of,
        "freshness": "off" if o.freshness_seconds is None else str(o.freshness_seconds),
        "persistence": o.persistence,
        "trim_trailing": str(o.trim_trailing).lower(),
        "compact_sources": str(o.compact_sources).lower(),
        "prune": o.prune,
    }
    if o.result_token_cap is not None:
        params["result_token_cap"] = str(o.result_token_cap)
    if o.context_budget is not None:
        params["context_budget"] = str(o.context_budget)
    return params


def export(client, key, cid: str, params: dict[str, str]) -> dict:
    response = client.get(f"{BASE}/{cid}/replay", query_string=params, headers=key.headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def reimport(client, key, cid: str, doc: dict) -> None:
    body = {"format": doc["format"], **copy.deepcopy(doc["payload"])}
    response = client.post(f"{BASE}/{cid}/import", json=body, headers=key.headers)
    assert response.status_code == 201, response.get_data(as_text=True)


@settings(
    max_examples=API_ROUND_TRIP_EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(histories(), options())
def test_stored_history_export_import_export_is_identical(
    app, client, project_key, h: History, o: ReplayOptions
) -> None:
    n = next(_cids)
    cid = f"gen-{n}"
    with app.app_context():
        store_history(project_key.project_id, cid, h)
    moment = o.as_of or latest_moment(sorted_messages(h))
    params = query_of(o, moment.isoformat() if moment is not None else "now")
    first = export(client, project_key, cid, params)
    reimport(client, project_key, f"{cid}-copy", first)
    copy_params = {**params, "as_of": "now"}
    second = export(client, project_key, f"{cid}-copy", copy_params)
    assert second["payload"] == first["payload"]
    reimport(client, project_key, f"{cid}-copy-2", second)
    third = export(client, project_key, f"{cid}-copy-2", copy_params)
    assert third["payload"] == second["payload"]
    assert [d["kind"] for d in third["diagnostics"]] == [d["kind"] for d in second["diagnostics"]]


# --- The cases of the issue ----------------------------------------------------------------------


def store_unanswered_round(client, key, cid: str) -> None:
    """Round 0 answered, round 1 never, no final text; then the next question."""
    turn = {
        "user": {"id": f"{cid}-q1", "content": "Where is order 7?"},
        "assistant": {
            "id": f"{cid}-a1",
            "rounds": [
                {"calls": [{"id": "c1", "name": "get_order", "response": {"content": "r1"}}]},
                {"calls": [{"id": "c2", "name": "track"}]},
            ],
        },
    }
    assert client.post(f"{BASE}/{cid}/turns", json=turn, headers=key.headers).status_code == 201
    q2 = {"messages": [{"id": f"{cid}-q2", "role": "user", "content": "Any news?"}]}
    assert client.post(f"{BASE}/{cid}/messages", json=q2, headers=key.headers).status_code == 201


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_round_sent_on_to_a_later_round_survives_two_round_trips(client, project_key, fmt):
    store_unanswered_round(client, project_key, "orig")
    first = export(client, project_key, "orig", {"format": fmt})
    assert '"c1"' in str(first["payload"]).replace("'", '"')
    reimport(client, project_key, "copy-1", first)
    second = export(client, project_key, "copy-1", {"format": fmt})
    assert second["payload"] == first["payload"]
    assert [d for d in second["diagnostics"] if d["kind"] != "message_merged"] == []
    reimport(client, project_key, "copy-2", second)
    assert export(client, project_key, "copy-2", {"format": fmt})["payload"] == first["payload"]


def test_an_import_answers_with_every_message_in_place_before_later_posts(client, project_key):
    """600 messages: all of them exist when the import answers, in their order, and a message
    posted right after sorts after them."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
        for i in range(600)
    ]
    body = {"format": "openai-chat", "messages": messages}
    before = datetime.now(UTC)
    response = client.post(f"{BASE}/big/import", json=body, headers=project_key.headers)
    answered = datetime.now(UTC)
    assert response.status_code == 201
    stored = response.get_json()["messages"]
    times = [datetime.fromisoformat(m["created_at"].replace("Z", "+00:00")) for m in stored]
    assert [m["content"] for m in stored] == [m["content"] for m in messages]
    assert times == sorted(times) and len(set(times)) == 600
    # Stamped back from the moment of the import, a microsecond apart.
    assert before - timedelta(microseconds=600) <= times[0] and times[-1] < answered
    doc = export(client, project_key, "big", {"freshness": "off"})
    assert len(doc["payload"]["messages"]) == 600
    assert [d for d in doc["diagnostics"] if d["kind"] == "after_as_of"] == []
    later = {"messages": [{"id": "later", "role": "user", "content": "posted later"}]}
    assert client.post(f"{BASE}/big/messages", json=later, headers=project_key.headers).status_code
    doc = export(client, project_key, "big", {"freshness": "off"})
    assert doc["payload"]["messages"][-1] == {"role": "user", "content": "posted later"}


def test_started_at_places_an_import_in_the_past_but_never_after_its_answer(client, project_key):
    body = {
        "format": "openai-chat",
        "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    }
    past = {**body, "started_at": "2026-03-10T09:00:00Z"}
    stored = client.post(f"{BASE}/past/import", json=past, headers=project_key.headers)
    assert [m["created_at"] for m in stored.get_json()["messages"]] == [
        "2026-03-10T09:00:00Z",
        "2026-03-10T09:00:00.000001Z",
    ]
    future = {**body, "started_at": "2999-01-01T00:00:00Z"}
    stored = client.post(f"{BASE}/future/import", json=future, headers=project_key.headers)
    answered = datetime.now(UTC)
    for m in stored.get_json()["messages"]:
        assert datetime.fromisoformat(m["created_at"].replace("Z", "+00:00")) <= answered
