"""GET /api/v1/conversations/{cid}/replay: the export document of a stored conversation, its
options as query parameters, errors, the download, a constant number of queries, and
export → import → export stability. On SQLite and PostgreSQL (the ``app`` fixture)."""

from __future__ import annotations

import copy
import json

import pytest
from api_support import assert_error
from factories import Call, big_conversation, calls, commit, conversation, message
from sqlalchemy import update

from webapp.db import db
from webapp.ingest.token_pass import count_pending
from webapp.models import ToolInvocation
from webapp.replay import validate

BASE = "/api/v1/conversations"
SOURCES = json.dumps(
    [
        {"source_number": 1, "title": "Refund policy", "text": "Refunds within 30 days."},
        {"source_number": 2, "title": "Shipping", "text": "Ships in 2 days."},
        {"source_number": 3, "title": "Warranty", "text": "Two years."},
    ]
)
TOOLS = [
    {
        "name": "search_kb",
        "description": "Search the knowledge base",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
    {"name": "get_order", "parameters": {"type": "object", "properties": {}}},
]


def store_support_chat(client, key, cid: str = "support-1") -> None:
    """A chat stored through the ingestion API as an agent would: a system prompt and tools,
    a turn with parallel calls (one with an empty id, one a sources list, one an error), a
    failed run with a call still waiting for its response, and a last user message."""
    h = key.headers
    put = {"title": "Refund for order #1042", "system_prompt": "Cite sources.", "tools": TOOLS}
    assert client.put(f"{BASE}/{cid}", json=put, headers=h).status_code == 201
    turn1 = {
        "user": {"id": "u1", "content": "I want a refund for order #1042."},
        "assistant": {
            "id": "a1",
            "content": "Refunds are possible within 30 days [source1].",
            "model": "gpt-4o",
            "rounds": [
                {
                    "calls": [
                        {
                            "id": "",
                            "name": "search_kb",
                            "arguments": {"query": "refund policy"},
                            "response": {"content": SOURCES},
                        },
                        {
                            "id": "call_order",
                            "name": "get_order",
                            "arguments": {"order_id": "1042"},
                            "response": {"content": '{"status": "delivered"}'},
                        },
                    ]
                },
                {
                    "calls": [
                        {
                            "id": "call_ticket",
                            "name": "create_ticket",
                            "arguments": {"order_id": "1042"},
                            "response": {"content": "ticket service down", "is_error": True},
                        }
                    ]
                },
            ],
        },
    }
    turn2 = {
        "user": {"id": "u2", "content": "And order #1043?"},
        "assistant": {
            "id": "a2",
            "status": "failed",
            "rounds": [{"calls": [{"id": "call_late", "name": "get_order", "arguments": {}}]}],
        },
    }
    for turn in (turn1, turn2):
        assert client.post(f"{BASE}/{cid}/turns", json=turn, headers=h).status_code == 201
    last = {"messages": [{"id": "u3", "role": "user", "content": "Thanks!"}]}
    assert client.post(f"{BASE}/{cid}/messages", json=last, headers=h).status_code == 201


def get_replay(client, key, cid: str = "support-1", **params):
    return client.get(f"{BASE}/{cid}/replay", query_string=params, headers=key.headers)


def export(client, key, cid: str = "support-1", **params) -> dict:
    response = get_replay(client, key, cid, **params)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


# --- The document ---------------------------------------------------------------------------------


def test_the_export_document_of_a_stored_conversation(client, project_key):
    store_support_chat(client, project_key)
    doc = export(client, project_key, freshness="off")

    assert doc["schema_version"] == 1
    assert doc["conversation"] == {
        "id": "support-1",
        "title": "Refund for order #1042",
        "channel": None,
    }
    assert doc["format"] == "openai-chat" and doc["as_of"].endswith("+00:00")
    assert doc["options"]["freshness"] == "off" and doc["options"]["token_counter"] == "stored"
    assert doc["validation"] == []
    messages = doc["payload"]["messages"]
    assert [m["role"] for m in messages] == [
        "system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "user",
        "user",
    ]  # fmt: skip
    assert [t["function"]["name"] for t in doc["payload"]["tools"]] == ["get_order", "search_kb"]
    generated = messages[2]["tool_calls"][0]["id"]
    assert generated.startswith("call_") and messages[3]["tool_call_id"] == generated
    assert json.loads(messages[3]["content"]) == json.loads(SOURCES)[:1]  # compacted
    kinds = {d["kind"] for d in doc["diagnostics"]}
    assert {"id_generated", "compacted", "run_not_completed"} <= kinds
    assert doc["stats"]["calls_total"] == 4 and doc["stats"]["calls_included"] == 3
    assert doc["next_source_number"] == 4
    # Replaying the raw rows would send an empty id and leave a call unanswered.
    naive = [(p["code"], p["path"]) for p in doc["naive_replay_problems"]]
    assert naive == [
        ("empty_id", "messages[2].tool_calls[0]"),
        ("empty_id", "messages[3]"),
        ("unanswered_call", "messages[9].tool_calls[0]"),
    ]


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_the_payload_is_valid_for_the_provider_in_every_format(client, project_key, fmt):
    store_support_chat(client, project_key)
    doc = export(client, project_key, format=fmt, persistence="per-service-call")
    assert doc["format"] == fmt
    assert validate(doc["payload"], fmt) == [] and doc["validation"] == []


def test_as_of_a_turn_start_replays_what_the_model_saw_then(client, project_key):
    store_support_chat(client, project_key)
    doc = export(client, project_key, as_of="turn:2", freshness="off")
    messages = doc["payload"]["messages"]
    assert messages[-1] == {"role": "user", "content": "And order #1043?"}
    assert "Thanks!" not in json.dumps(messages)
    assert doc["options"]["as_of"] == "turn:2"
    first = export(client, project_key, as_of="turn:1")["payload"]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]


def test_the_default_freshness_is_the_channels_window(client, project_key):
    store_support_chat(client, project_key)
    h = project_key.headers
    assert client.put(f"{BASE}/support-1", json={"channel": "bot"}, headers=h).status_code == 200
    window = client.put("/api/v1/channels/bot", json={"freshness_seconds": 0}, headers=h)
    assert window.status_code in (200, 201)
    doc = export(client, project_key)
    assert doc["options"]["freshness_seconds"] == 0 and doc["conversation"]["channel"] == "bot"
    assert doc["stats"]["calls_included"] == 0 and doc["stats"]["calls_omitted"]["stale"] == 3
    assert export(client, project_key, freshness="off")["stats"]["calls_included"] == 3


def test_token_estimates_use_the_counts_stored_by_the_token_pass(app, client, project_key):
    store_support_chat(client, project_key)
    params = {"freshness": "off", "compact_sources": "false", "as_of": "2099-01-01T00:00:00Z"}
    url = f"{BASE}/support-1/replay"
    uncounted = client.get(url, query_string=params, headers=project_key.headers).get_data()
    with app.app_context():
        assert count_pending() > 0
    # Counted on the fly before the pass, as the pass counts: the same export to the byte.
    counted = client.get(url, query_string=params, headers=project_key.headers)
    assert counted.get_data() == uncounted
    before = export(client, project_key, freshness="off", compact_sources="false")
    with app.app_context():
        db.session.execute(
            update(ToolInvocation)
            .where(ToolInvocation.external_tool_call_id == "call_order")
            .values(response_tokens=ToolInvocation.response_tokens + 1000)
        )
        db.session.commit()
    after = export(client, project_key, freshness="off", compact_sources="false")
    assert after["stats"]["estimated_tokens"] == before["stats"]["estimated_tokens"] + 1000


def test_a_context_budget_prunes_whole_units_and_says_so(client, project_key):
    store_support_chat(client, project_key)
    full = export(client, project_key, freshness="off")
    budget = full["stats"]["estimated_tokens"] - 20
    doc = export(client, project_key, freshness="off", context_budget=budget)
    assert doc["stats"]["budget"] == budget and doc["stats"]["units_pruned"] >= 1
    assert doc["stats"]["estimated_tokens"] <= budget
    assert any(d["kind"] == "pruned" for d in doc["diagnostics"])
    assert doc["validation"] == []


def test_download_is_an_attachment_named_after_conversation_and_format(client, project_key):
    store_support_chat(client, project_key)
    response = get_replay(client, project_key, format="anthropic", download="1")
    assert response.status_code == 200
    assert response.headers["Content-Disposition"] == (
        'attachment; filename="replay-support-1-anthropic.json"'
    )
    assert response.mimetype == "application/json"
    assert json.loads(response.data)["format"] == "anthropic"


def test_a_hostile_conversation_id_cannot_break_the_download_header(client, project_key):
    cid = 'x"; filename=evil.sh'
    messages = {"messages": [{"id": "u1", "role": "user", "content": "hi"}]}
    path = f"{BASE}/x%22%3B%20filename%3Devil.sh"
    stored = client.post(path + "/messages", json=messages, headers=project_key.headers)
    assert stored.status_code == 201
    response = client.get(path + "/replay?download=true", headers=project_key.headers)
    assert response.status_code == 200
    disposition = response.headers["Content-Disposition"]
    assert disposition == 'attachment; filename="replay-x_filename_evil.sh-openai-chat.json"'
    assert response.get_json()["conversation"]["id"] == cid


# --- Errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"format": "gemini"}, "query.format"),
        ({"as_of": "last tuesday"}, "query.as_of"),
        ({"freshness": "-5"}, "query.freshness"),
        ({"persistence": "sometimes"}, "query.persistence"),
        ({"result_token_cap": "-1"}, "query.result_token_cap"),
        ({"context_budget": "lots"}, "query.context_budget"),
        ({"prune": "random"}, "query.prune"),
        ({"trim_trailing": "perhaps"}, "query.trim_trailing"),
        ({"freshnes": "off"}, "query.freshnes"),
    ],
)
def test_an_unusable_option_is_a_422_naming_the_parameter(client, project_key, params, field):
    store_support_chat(client, project_key)
    body = assert_error(get_replay(client, project_key, **params), 422, "invalid", field=field)
    assert body["message"].startswith(field)


def test_a_turn_the_conversation_does_not_have_is_a_404_naming_the_parameter(client, project_key):
    # Well formed, so a generated client sends it: like an unknown conversation, it is not there.
    store_support_chat(client, project_key)
    response = get_replay(client, project_key, as_of="turn:9")
    body = assert_error(response, 404, "not_found", field="query.as_of")
    assert body["message"] == "query.as_of: there is no turn 9: this conversation has 3 turns"


def test_a_missing_or_wrong_key_is_401(client, project_key):
    store_support_chat(client, project_key)
    assert_error(client.get(f"{BASE}/support-1/replay"), 401, "unauthorized")
    bad = {"Authorization": "Bearer ts_nope"}
    assert_error(client.get(f"{BASE}/support-1/replay", headers=bad), 401, "unauthorized")


def test_another_projects_conversation_is_404_like_an_unknown_one(
    client, project_key, other_project_key
):
    store_support_chat(client, project_key)
    assert_error(get_replay(client, other_project_key), 404, "not_found")
    assert_error(get_replay(client, project_key, cid="nope"), 404, "not_found")


def test_an_empty_conversation_replays_to_an_empty_payload_with_a_diagnostic(client, project_key):
    assert client.put(f"{BASE}/empty", json={}, headers=project_key.headers).status_code == 201
    doc = export(client, project_key, cid="empty")
    assert doc["payload"] == {"messages": []}
    assert [d["kind"] for d in doc["diagnostics"]] == ["empty_payload"]
    # Providers refuse an empty list: validation says so (docs/replay.md, `validation`).
    assert [p["code"] for p in doc["validation"]] == ["empty_payload"]


def test_the_endpoint_is_in_the_openapi_document_with_its_parameters(client):
    spec = client.get("/api/openapi.json").get_json()
    operation = spec["paths"]["/api/v1/conversations/{cid}/replay"]["get"]
    assert operation["security"] == [{"bearer": []}]
    names = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
    assert names == {
        "format", "as_of", "freshness", "persistence", "trim_trailing", "compact_sources",
        "result_token_cap", "context_budget", "prune", "download",
    }  # fmt: skip
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer["$ref"].endswith("/ReplayExportOut")
    assert {"401", "404", "422"} <= set(operation["responses"])


# --- Constant queries -----------------------------------------------------------------------------


def test_the_number_of_queries_does_not_grow_with_the_conversation(
    app, client, project_key, count_queries
):
    with app.app_context():
        big_conversation(project_key.project_id, "small", turns=1, rounds=2, parallel=5)
        big_conversation(project_key.project_id, "large", turns=10, rounds=10, parallel=5)
        commit()
    counts = {}
    for cid in ("small", "large"):
        get_replay(client, project_key, cid)  # warm-up: the key's last use is recorded once
        with count_queries() as counter:
            doc = export(client, project_key, cid, freshness="off")
        counts[cid] = counter.count
        assert doc["stats"]["calls_total"] in (10, 500)
    assert counts["small"] == counts["large"] <= 7


# --- Export → import → export ---------------------------------------------------------------------


def reimport(client, key, cid: str, doc: dict) -> None:
    body = {"format": doc["format"], **copy.deepcopy(doc["payload"])}
    response = client.post(f"{BASE}/{cid}/import", json=body, headers=key.headers)
    assert response.status_code == 201, response.get_data(as_text=True)


def rule_diagnostics(doc: dict) -> list[str]:
    """Diagnostics of rules that leave something out or change it; Anthropic's notes on merging
    consecutive messages of one role describe the rendering, which the copy shares."""
    return [d["kind"] for d in doc["diagnostics"] if d["kind"] != "message_merged"]


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_export_import_export_gives_the_same_payload(client, project_key, fmt):
    store_support_chat(client, project_key)
    first = export(client, project_key, format=fmt)
    reimport(client, project_key, "copy-1", first)
    second = export(client, project_key, cid="copy-1", format=fmt)
    assert second["payload"] == first["payload"]
    assert second["validation"] == []
    # Sending the copy's rows as they are would break nothing but Anthropic's alternation: the
    # blocks of one merged message are stored as messages of their own.
    assert {p["code"] for p in second["naive_replay_problems"]} <= {"role_order"}
    # The copy holds exactly what was sent: its replay leaves nothing out and changes nothing.
    assert rule_diagnostics(second) == []
    merged = [d for d in first["diagnostics"] if d["kind"] == "message_merged"]
    assert len([d for d in second["diagnostics"] if d["kind"] == "message_merged"]) == len(merged)
    # And from then on the whole document is stable, but for the moment and the id.
    reimport(client, project_key, "copy-2", second)
    third = export(client, project_key, cid="copy-2", format=fmt)
    assert without_moment(third) == without_moment(second)


def without_moment(doc: dict) -> dict:
    """The document but for the moment and the conversation (its message ids and row ids)."""
    stats = {k: v for k, v in doc["stats"].items() if k != "as_of"}
    diagnostics = [{**d, "message_id": None, "call_row_id": None} for d in doc["diagnostics"]]
    return {**doc, "as_of": None, "conversation": None, "stats": stats, "diagnostics": diagnostics}


def test_a_stored_conversation_with_every_kind_of_row_round_trips(app, client, project_key):
    """Rows written straight to the database (no API), with ids the provider would refuse."""
    from datetime import UTC, datetime, timedelta

    start = datetime.now(UTC) - timedelta(minutes=1)
    with app.app_context():
        conv = conversation(project_key.project_id, "rows", system_prompt="Be brief.")
        message(conv, "rows-u1", "user", "Go", at=start)
        a = message(conv, "rows-a1", "assistant", "Done.", at=start, status="completed")
        calls(
            a,
            0,
            [
                Call("lookup", {"k": 1}, "one", external_id="dup"),
                Call("lookup", {"k": 2}, "two", external_id="dup"),
                Call("lookup", None, "", external_id="x" * 80),
            ],
            at=start,
        )
        commit()
    first = export(client, project_key, cid="rows", freshness="off")
    assert {d["kind"] for d in first["diagnostics"]} == {"id_renamed"}
    reimport(client, project_key, "rows-copy", first)
    second = export(client, project_key, cid="rows-copy", freshness="off")
    assert second["payload"] == first["payload"]


# --- The benchmark's replay section -----------------------------------------------------------


def test_the_bench_replay_section_reports_core_and_api_figures():
    """`toolscope bench --only replay`: its own gunicorn and scratch SQLite file."""
    from click.testing import CliRunner

    from webapp.bench import command

    result = CliRunner().invoke(command, ["--only", "replay", "--seconds", "0.5", "--json"])
    assert result.exit_code == 0, result.output
    (target,) = json.loads(result.stdout)["targets"]
    figures = {f["label"]: f["values"] for f in target["figures"]}
    for size in ("1,000", "10,000", "50,000"):
        core = next(v for label, v in figures.items() if label.startswith(f"replay core, {size}"))
        assert core["runs"] >= 3 and 0 < core["min_ms"] <= core["median_ms"]
    label = "GET /api/v1/conversations/{cid}/replay, 10,000 calls"
    cold = figures[f"{label}, cold (each after a write: computed)"]
    warm = figures[f"{label}, warm (repeated: the replay cache)"]
    for api in (cold, warm):
        assert api["errors"] == 0 and api["requests"] >= 5
        assert 0 < api["p50_ms"] <= api["p95_ms"]
        assert api["response_bytes"] > 1_000_000  # the whole 10,000-call payload came back
    assert warm["p50_ms"] < cold["p50_ms"]
