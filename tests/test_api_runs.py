"""Runs over the API (issue 25, items 2 and 7): a conversation's replay sent through the real
`openai` and `anthropic` SDKs to fake providers on loopback (tests/fake_providers.py), for the
three formats; edits and policies that change the model's next action; every provider failure
a clear error on the run; the cache; the API's own errors and tenancy. The queue is worked in
the test's thread (tests/test_server_run_worker.py runs real workers)."""

from __future__ import annotations

import gc
import json
from decimal import Decimal

import pytest
from api_support import assert_error
from fake_providers import API_KEY
from runs_support import (
    CALL_ID,
    CID,
    RESULT,
    RUN_CONFIG,
    add_connection,
    connect_fake,
    connection_for,
    orders_conversation,
    work,
)

from webapp.api.runs import RunList, RunOut
from webapp.db import db
from webapp.models import ModelRun, Project
from webapp.services import model_runs

FORMATS = ("openai-chat", "openai-responses", "anthropic")
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
}
LOOKUP = [{"name": "lookup_order", "arguments": {"order_id": "A1"}}]


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


@pytest.fixture
def orders(app, project_key, fake):
    orders_conversation(app, project_key.project_id)
    connect_fake(app, project_key.project_id, fake)
    return project_key


def post_run(client, key, cid=CID, **body):
    body.setdefault("connection", connection_for(body.get("format", "openai-chat")))
    return client.post(f"/api/v1/conversations/{cid}/runs", json=body, headers=key.headers)


def get_run(client, key, run_id):
    response = client.get(f"/api/v1/runs/{run_id}", headers=key.headers)
    assert response.status_code == 200, response.get_json()
    document = response.get_json()
    RunOut.model_validate(document)  # the answer is what the OpenAPI document says
    return document


def run_once(app, client, key, **body):
    """POST a run, work the queue, GET it back."""
    response = post_run(client, key, **body)
    assert response.status_code == 202, response.get_json()
    work(app)
    return get_run(client, key, response.get_json()["id"])


def calls_of(document):
    action = document["next_action"]
    return [{"name": c["name"], "arguments": c["arguments"]} for c in action["calls"]]


# --- End to end ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_run_goes_through_the_sdk_and_stores_what_the_model_does_next(
    app, client, orders, fake, fmt
):
    with app.app_context():
        project = db.session.get(Project, orders.project_id)
        project.price_overrides = {"scripted*": {"input_per_mtok": "1", "output_per_mtok": "2"}}
        db.session.commit()
    response = post_run(client, orders, format=fmt, as_of="turn:2")
    assert response.status_code == 202, response.get_json()
    queued = response.get_json()
    RunOut.model_validate(queued)
    assert queued["status"] == "queued" and queued["id"].startswith("run_")
    assert response.headers["Location"] == f"/api/v1/runs/{queued['id']}"
    assert fake.count() == 0  # the request did not wait on the model

    assert work(app) == 1
    run = get_run(client, orders, queued["id"])
    assert run["status"] == "succeeded", run["error"]
    # At turn 2 the first lookup's result is an hour old: stale, left out. The scripted model
    # misses it and calls the tool again, as the agent really did.
    assert calls_of(run) == LOOKUP
    assert run["next_action"]["kind"] == "calls"
    assert calls_of({"next_action": run["recorded_action"]}) == LOOKUP
    assert run["comparison"]["category"] == "same_calls"
    # The exact body the SDK sent, stored (no credentials in it), and the raw answer.
    assert fake.count(PATHS[fmt]) == 1
    sent = fake.requests[-1]
    assert sent.body == run["request"]
    assert API_KEY not in json.dumps(run)
    assert sent.headers.get("authorization", sent.headers.get("x-api-key", "")).endswith(API_KEY)
    assert run["model"] == "scripted" == sent.model
    # Anthropic's API takes no sampling parameter any more: its body has none.
    assert run["request"].get("temperature") == (None if fmt == "anthropic" else 0)
    assert run["temperature"] == run["request"].get("temperature")
    assert run["response"]["id"]
    # Usage in the provider's shape, priced by the project's override (the charts' source).
    usage = run["usage"]
    assert usage["output_tokens"] == 12 and usage["input_tokens"] > 0
    expected = (Decimal(usage["input_tokens"]) * 1 + Decimal(12) * 2) / Decimal(1_000_000)
    assert Decimal(run["cost_usd"]) == expected
    assert run["latency_ms"] is not None and run["latency_ms"] >= 0
    assert run["attempts"] == 1 and run["error"] is None
    assert run["started_at"] and run["finished_at"] and run["as_of"].startswith("2026-03-01T10")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_policy_or_an_edit_changes_the_next_action(app, client, orders, fmt):
    # Freshness off: the first result is replayed, so the model answers from it.
    run = run_once(app, client, orders, format=fmt, as_of="turn:2", freshness="off")
    assert run["next_action"]["kind"] == "answer"
    assert run["next_action"]["text"] == f"Order A1: {RESULT}."
    assert run["comparison"]["category"] == "answered_instead_of_calling"

    replaced = [{"type": "replace_result", "call_id": CALL_ID, "content": "cancelled"}]
    run = run_once(app, client, orders, format=fmt, as_of="turn:2", freshness="off", edits=replaced)
    assert run["next_action"]["text"] == "Order A1: cancelled."
    assert run["edits"] == replaced

    failed = [{"type": "fail_call", "call_id": CALL_ID, "message": "ERROR: timeout"}]
    run = run_once(app, client, orders, format=fmt, as_of="turn:2", freshness="off", edits=failed)
    assert calls_of(run) == LOOKUP

    dropped = [{"type": "drop_call", "call_id": CALL_ID}]
    run = run_once(app, client, orders, format=fmt, as_of="turn:2", freshness="off", edits=dropped)
    assert calls_of(run) == LOOKUP
    assert all("cancelled" not in json.dumps(m) for m in run["request"].get("messages", []))


def test_the_provider_waits_outside_any_transaction_and_any_gc_pause(
    app, client, orders, monkeypatch
):
    seen = []
    send = model_runs.send

    def watching(*args, **kwargs):
        seen.append((db.session().in_transaction(), gc.isenabled()))
        return send(*args, **kwargs)

    monkeypatch.setattr(model_runs, "send", watching)
    run = run_once(app, client, orders, as_of="turn:2")
    assert run["status"] == "succeeded"
    assert seen == [(False, True)]


# --- Failures: a clear error on the run, never a 500, nothing lost -------------------------------

FAILURES = [
    # (connection kind, model, status, kind, words of the provider's message)
    ("openai", "gpt-nonexistent", 404, "model_not_found", "does not exist"),
    ("anthropic", "claude-nonexistent", 404, "model_not_found", "model: claude-nonexistent"),
    ("openai", "scripted-too-long", 400, "bad_request", "maximum context length is 128000"),
    ("anthropic", "scripted-too-long", 400, "bad_request", "prompt is too long"),
    ("openai", "scripted-rate-limited", 429, "rate_limited", "Rate limit reached"),
    ("anthropic", "scripted-rate-limited", 429, "rate_limited", "exceed the rate limit"),
    ("openai", "scripted-slow", None, "timeout", "no answer within 2 s"),
    ("openai", "scripted-not-json", 200, "malformed_answer", "not JSON"),
    ("openai", "scripted-wrong-shape", 200, "malformed_answer", "choices"),
    ("anthropic", "scripted-wrong-shape", 200, "malformed_answer", "content"),
    ("openai", "scripted-drop", None, "connection", "could not reach"),
]


@pytest.mark.parametrize(("kind", "model", "status", "error_kind", "words"), FAILURES)
def test_each_provider_failure_is_a_clear_error_on_the_run(
    app, client, orders, fake, kind, model, status, error_kind, words
):
    fmt = "anthropic" if kind == "anthropic" else "openai-chat"
    response = post_run(client, orders, format=fmt, model=model, as_of="turn:2")
    assert response.status_code == 202
    work(app)
    run = get_run(client, orders, response.get_json()["id"])
    assert run["status"] == "failed"
    assert run["error"]["status"] == status
    assert run["error"]["kind"] == error_kind
    assert words in run["error"]["message"], run["error"]
    assert API_KEY not in json.dumps(run)
    assert run["request"]["model"] == model and run["finished_at"]
    # Nothing lost: the request that failed is stored and listed.
    listed = client.get(f"/api/v1/conversations/{CID}/runs", headers=orders.headers)
    assert [r["id"] for r in listed.get_json()["data"]] == [run["id"]]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_wrong_key_is_an_auth_error_that_never_shows_the_key(
    app, client, project_key, fake, kind
):
    orders_conversation(app, project_key.project_id)
    wrong = "sk-wrong-key-" + "x" * 20
    base = fake.openai_url if kind == "openai" else fake.base_url
    add_connection(app, project_key.project_id, "bad", kind, base, api_key=wrong)
    fmt = "anthropic" if kind == "anthropic" else "openai-chat"
    run = run_once(app, client, project_key, connection="bad", format=fmt)
    assert run["status"] == "failed"
    assert (run["error"]["status"], run["error"]["kind"]) == (401, "auth")
    assert "key" in run["error"]["message"].lower()
    assert wrong not in json.dumps(run)


def test_429_is_retried_by_the_sdk_first(app, client, orders, fake):
    app.config["MODEL_MAX_RETRIES"] = 2
    run = run_once(app, client, orders, model="scripted-rate-limited")
    assert run["error"]["kind"] == "rate_limited"
    assert "after the SDK's retries" in run["error"]["message"]
    assert fake.count(model="scripted-rate-limited") == 3


def test_a_refused_connection_is_an_error_on_the_run(app, client, project_key):
    orders_conversation(app, project_key.project_id)
    add_connection(app, project_key.project_id, "nowhere", "openai", "http://127.0.0.1:9/v1")
    run = run_once(app, client, project_key, connection="nowhere")
    assert run["status"] == "failed"
    assert run["error"]["kind"] == "connection" and run["error"]["status"] is None
    assert "127.0.0.1:9" in run["error"]["message"]


def test_a_connection_removed_after_the_run_was_queued_fails_the_run(app, client, orders, fake):
    response = post_run(client, orders)
    with app.app_context():
        from webapp.ingest.transaction import Write, run_write
        from webapp.services.model_connections import delete_connection

        run_write(Write(delete_connection, (orders.project_id, "oa")))
        db.session.remove()
    work(app)
    run = get_run(client, orders, response.get_json()["id"])
    assert run["status"] == "failed" and "removed" in run["error"]["message"]
    assert run["connection"] == "oa"  # the name it was made with
    assert fake.count() == 0


# --- The cache -----------------------------------------------------------------------------------


def test_the_same_request_at_temperature_0_is_answered_from_the_stored_run(
    app, client, orders, fake
):
    first = run_once(app, client, orders, as_of="turn:2")
    assert fake.count() == 1

    again = post_run(client, orders, as_of="turn:2")
    assert again.status_code == 202
    cached = again.get_json()
    assert cached["status"] == "succeeded" and cached["cached_from"] == first["id"]
    assert cached["next_action"] == first["next_action"]
    assert cached["response"] == first["response"]
    assert cached["cost_usd"] == "0" and cached["request_key"] == first["request_key"]
    assert work(app) == 0
    assert fake.count() == 1  # nobody paid twice

    fresh = run_once(app, client, orders, as_of="turn:2", fresh=True)
    assert fresh["cached_from"] is None and fresh["status"] == "succeeded"
    assert fake.count() == 2

    warm = run_once(app, client, orders, as_of="turn:2", temperature=0.7)
    assert warm["cached_from"] is None and fake.count() == 3
    # Another request body (another policy) is another question.
    other = run_once(app, client, orders, as_of="turn:2", freshness="off")
    assert other["cached_from"] is None and fake.count() == 4


def test_a_failed_run_is_not_a_cached_answer(app, client, orders, fake):
    run_once(app, client, orders, model="scripted-not-json")
    again = run_once(app, client, orders, model="scripted-not-json")
    assert again["cached_from"] is None and fake.count() == 2


# --- The API's own errors ------------------------------------------------------------------------


def test_run_errors_say_what_is_wrong(app, client, orders, monkeypatch):
    assert_error(post_run(client, orders, cid="nope"), 404, "not_found")
    response = post_run(client, orders, connection="missing")
    error = assert_error(response, 404, "not_found")
    assert "no model connection named 'missing'" in error["message"]
    for body, field in [
        ({"as_of": "yesterday"}, "as_of"),
        ({"freshness": "-1"}, "freshness"),
        ({"prune": "lifo"}, "prune"),
        ({"temperature": 3}, "temperature"),
        ({"edits": [{"type": "rename_call", "call_id": "x"}]}, "edits"),
        ({"edits": [{"type": "drop_call", "call_id": "no-such-call"}]}, "edits[0].call_id"),
        ({"format": "anthropic", "connection": "oa"}, "format"),
    ]:
        response = post_run(client, orders, **body)
        assert response.status_code == 422, (body, response.get_json())
        assert field in response.get_json()["error"]["message"], response.get_json()
    # A turn the conversation does not have is not there.
    assert_error(post_run(client, orders, as_of="turn:9"), 404, "not_found")
    # An unusable connection: its key's environment variable is not set on the server.
    monkeypatch.delenv("TS_TEST_UNSET_KEY", raising=False)
    add_connection(
        app, orders.project_id, "envless", "openai", "http://127.0.0.1:9/v1",
        api_key=None, api_key_env="TS_TEST_UNSET_KEY",
    )  # fmt: skip
    response = post_run(client, orders, connection="envless")
    error = assert_error(response, 409, "conflict")
    assert "TS_TEST_UNSET_KEY" in error["message"]
    with app.app_context():
        assert db.session.query(ModelRun).count() == 0  # nothing was queued
    assert_error(client.get("/api/v1/runs/run_nope", headers=orders.headers), 404, "not_found")


def test_runs_are_the_projects_own(app, client, orders, other_project_key):
    run = run_once(app, client, orders)
    response = client.get(f"/api/v1/runs/{run['id']}", headers=other_project_key.headers)
    assert_error(response, 404, "not_found")
    listed = client.get(f"/api/v1/conversations/{CID}/runs", headers=other_project_key.headers)
    assert_error(listed, 404, "not_found")
    # Another project cannot use this project's connection either.
    orders_conversation(app, other_project_key.project_id)
    assert_error(post_run(client, other_project_key), 404, "not_found")


def test_a_conversations_runs_are_listed_newest_first(app, client, orders):
    ids = [post_run(client, orders, fresh=True).get_json()["id"] for _ in range(3)]
    response = client.get(f"/api/v1/conversations/{CID}/runs", headers=orders.headers)
    assert response.status_code == 200
    listing = response.get_json()
    RunList.model_validate(listing)
    assert [r["id"] for r in listing["data"]] == ids[::-1]
    assert {r["status"] for r in listing["data"]} == {"queued"}


def test_runs_are_in_the_openapi_document(client):
    document = client.get("/api/openapi.json").get_json()
    post = document["paths"]["/api/v1/conversations/{cid}/runs"]["post"]
    assert "202" in post["responses"]
    assert "/api/v1/runs/{run_id}" in document["paths"]


def test_a_fault_of_ours_fails_the_run_and_says_so(app, client, orders, monkeypatch):
    def broken(*_args):
        raise KeyError("usage")

    monkeypatch.setattr(model_runs, "parse_usage", broken)
    run = run_once(app, client, orders)
    assert run["status"] == "failed" and run["attempts"] == 1
    assert run["error"]["kind"] == "internal" and "KeyError" in run["error"]["message"]


def test_a_queued_run_can_be_cancelled_and_is_never_sent(app, client, orders, fake):
    run_id = post_run(client, orders).get_json()["id"]
    response = client.post(f"/api/v1/runs/{run_id}/cancel", headers=orders.headers)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["status"] == "cancelled"
    assert work(app) == 0 and fake.count() == 0
    assert get_run(client, orders, run_id)["finished_at"]
    again = client.post(f"/api/v1/runs/{run_id}/cancel", headers=orders.headers)
    assert_error(again, 409, "conflict")
    missing = client.post("/api/v1/runs/run_nope/cancel", headers=orders.headers)
    assert_error(missing, 404, "not_found")
