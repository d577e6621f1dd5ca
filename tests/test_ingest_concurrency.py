"""Concurrent writers lose nothing and duplicate nothing; a crash mid-batch leaves nothing."""

from __future__ import annotations

import multiprocessing
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from api_support import native_call, raw_rows, row_counts, tool_item

from webapp.ingest import conversations as ingest_conversations
from webapp.ingest import writes as ingest_writes

SHARED_MESSAGES = 6
CALLS_PER_BATCH = 20


def shared_batches(with_responses: bool) -> list[dict]:
    """The same batches every writer sends (retries, duplicates, late responses)."""
    return [
        {
            "messageId": f"shared-{m}",
            "tools": [
                tool_item(i // 5, i % 5, response=f"r{m}-{i}" if with_responses else None)
                for i in range(CALLS_PER_BATCH)
            ],
        }
        for m in range(SHARED_MESSAGES)
    ]


def own_batches(writer: int) -> list[dict]:
    return [
        {
            "messageId": f"own-{writer}-{m}",
            "tools": [tool_item(0, i, response="x") for i in range(CALLS_PER_BATCH)],
        }
        for m in range(3)
    ]


def conversation_posts(writer: int) -> list[dict]:
    """Messages for one shared conversation (created by whoever comes first)."""
    return [
        {
            "messages": [
                {"id": "c-user", "role": "user", "content": "same for everyone"},
                {
                    "id": f"c-answer-{writer}",
                    "role": "assistant",
                    "content": f"writer {writer}",
                    "tool_calls": [native_call(0, i, response="ok") for i in range(5)],
                },
            ]
        }
    ]


EXPECTED_CALLS_PER_WRITER = 3 * CALLS_PER_BATCH + 5


def _check_final_state(app, client, key, writers: int) -> None:
    counts = row_counts(app)
    assert counts["tool_invocation"] == (
        SHARED_MESSAGES * CALLS_PER_BATCH + writers * EXPECTED_CALLS_PER_WRITER
    )
    assert counts["conversation"] == 1
    assert counts["message"] == SHARED_MESSAGES + writers * 3 + 1 + writers
    duplicates = raw_rows(
        app,
        "SELECT message_id, round_index, sequence_index, COUNT(*) FROM tool_invocation "
        "GROUP BY message_id, round_index, sequence_index HAVING COUNT(*) > 1",
    )
    assert duplicates == []
    ids = ",".join(f"shared-{m}" for m in range(SHARED_MESSAGES))
    shared = client.get(f"/api/v1/messages/tools?messageIds={ids}", headers=key.headers)
    data = shared.get_json()["data"]
    assert len(data) == SHARED_MESSAGES * CALLS_PER_BATCH
    # Writers with and without responses raced: the responses always end up stored.
    assert all(t["response"] is not None for t in data)


def _writer_plan(writer: int) -> list[tuple[str, dict]]:
    plan = [("/api/v1/messages/tools", b) for b in shared_batches(writer % 2 == 0)]
    plan += [("/api/v1/messages/tools", b) for b in own_batches(writer)]
    plan += [("/api/v1/conversations/shared/messages", b) for b in conversation_posts(writer)]
    random.Random(writer).shuffle(plan)
    return plan


def test_threads_posting_overlapping_batches_over_http(app, client, live_server, project_key):
    writers = 6

    def write(writer: int) -> list[int]:
        with requests.Session() as session:
            session.headers.update(project_key.headers)
            return [
                session.post(live_server + url, json=body, timeout=30).status_code
                for url, body in _writer_plan(writer)
            ]

    with ThreadPoolExecutor(writers) as pool:
        statuses = [s for result in pool.map(write, range(writers)) for s in result]

    assert set(statuses) == {201}
    _check_final_state(app, client, project_key, writers)


def _process_writer(database_url: str, key: str, writer: int) -> list[int]:
    """Runs in its own process with its own app, engine and connections."""
    from conftest import make_test_app

    app = make_test_app(database_url)
    client = app.test_client()
    headers = {"Authorization": f"Bearer {key}"}
    return [
        client.post(url, json=body, headers=headers).status_code
        for url, body in _writer_plan(writer)
    ]


def test_processes_posting_overlapping_batches(app, client, database_url, project_key):
    writers = 2  # each process pays ~2 s to start; two are enough to interleave
    # spawn, not fork: a forked child must not share the parent's database connections.
    context = multiprocessing.get_context("spawn")
    with context.Pool(writers) as pool:
        results = pool.starmap(
            _process_writer, [(database_url, project_key.key, w) for w in range(writers)]
        )
    assert {s for statuses in results for s in statuses} == {201}
    _check_final_state(app, client, project_key, writers)


def test_a_crash_mid_batch_leaves_nothing(app, client, project_key, monkeypatch):
    """The calls and messages are inserted, then the write fails before the commit."""

    def crash(*_args, **_kwargs):
        raise RuntimeError("the server died here")

    monkeypatch.setattr(ingest_writes, "touch_conversations", crash)
    response = client.post(
        "/api/v1/conversations/c1/messages",
        json={
            "messages": [
                {
                    "id": "a1",
                    "role": "assistant",
                    "tool_calls": [native_call(0, i, response="r") for i in range(10)],
                }
            ]
        },
        headers=project_key.headers,
    )
    assert response.status_code == 500
    assert response.get_json()["error"]["code"] == "internal"
    assert sum(row_counts(app).values()) == 0


def test_a_lost_creation_race_is_retried_once(app, client, project_key, monkeypatch):
    """Another writer created the conversation after our read: the request runs again."""
    client.put(
        "/api/v1/conversations/c1",
        json={"title": "created by the other writer"},
        headers=project_key.headers,
    )
    real_find = ingest_conversations.find_conversation
    calls = []

    def stale_once(project_id, external_id):
        calls.append(external_id)
        return None if len(calls) == 1 else real_find(project_id, external_id)

    monkeypatch.setattr(ingest_conversations, "find_conversation", stale_once)
    response = client.post(
        "/api/v1/conversations/c1/messages",
        json={"messages": [{"id": "u1", "role": "user", "content": "hi"}]},
        headers=project_key.headers,
    )
    assert response.status_code == 201
    assert len(calls) == 2
    assert row_counts(app)["conversation"] == 1
    assert row_counts(app)["message"] == 1


def test_a_race_lost_twice_answers_503_so_clients_retry(app, client, project_key, monkeypatch):
    client.put("/api/v1/conversations/c1", json={}, headers=project_key.headers)
    monkeypatch.setattr(ingest_conversations, "find_conversation", lambda *_: None)
    response = client.post(
        "/api/v1/conversations/c1/messages",
        json={"messages": [{"id": "u1", "role": "user", "content": "hi"}]},
        headers=project_key.headers,
    )
    assert response.status_code == 503
    assert response.get_json()["error"]["code"] == "busy"
    assert row_counts(app)["message"] == 0


@pytest.fixture(autouse=True)
def _quiet_werkzeug_log(caplog):
    caplog.set_level("WARNING", logger="werkzeug")
