"""The OTLP/HTTP receiver: encodings, auth, sizes, answers, duplicates, order
independence, projects kept apart, and a constant number of statements per request."""

from __future__ import annotations

import gzip
import json
import random

import pytest
import requests
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.api_support import raw_rows, row_counts
from tests.otlp_support import (
    FINAL,
    PROMPT,
    agent_run,
    logs_json,
    logs_protobuf,
    make_log,
    make_span,
    traces_json,
    traces_protobuf,
)

PB = "application/x-protobuf"
JS = "application/json"


def post(client, key, body: bytes, *, signal="traces", content_type=PB, path=None, **headers):
    headers = {"Content-Type": content_type, **headers}
    if key is not None:
        headers["Authorization"] = f"Bearer {key.key}"
    return client.post(path or f"/v1/{signal}", data=body, headers=headers)


def _state(app, project_id: int | None = None) -> list:
    """What the projection wrote, without row ids and clocks: compared across arrival orders."""
    where = f"WHERE c.project_id = {int(project_id)}" if project_id is not None else ""
    return [
        raw_rows(
            app,
            "SELECT c.external_id, c.title, c.system_prompt, c.created_at FROM conversation c "
            f"{where} ORDER BY c.external_id",
        ),
        raw_rows(
            app,
            "SELECT m.external_id, c.external_id, m.role, m.content, m.status, m.model, "
            "m.created_at FROM message m JOIN conversation c ON c.id = m.conversation_id "
            f"{where} ORDER BY m.external_id",
        ),
        raw_rows(
            app,
            "SELECT m.external_id, t.round_index, t.sequence_index, t.external_tool_call_id, "
            "t.function_name, t.arguments, t.response, t.is_error, t.created_at, t.started_at, "
            "t.ended_at, t.response_created_at FROM tool_invocation t "
            "JOIN message m ON m.id = t.message_id "
            f"JOIN conversation c ON c.id = m.conversation_id {where} ORDER BY 1, 2, 3",
        ),
        raw_rows(
            app,
            "SELECT m.external_id, s.round_index, s.model, s.input_tokens, s.output_tokens, "
            "s.created_at FROM service_call s JOIN message m ON m.id = s.message_id "
            f"JOIN conversation c ON c.id = m.conversation_id {where} ORDER BY 1, 2",
        ),
    ]


def test_protobuf_export_becomes_a_conversation(app, client, project_key):
    run = agent_run(1, rounds=3, conversation="conv-1")
    response = post(client, project_key, traces_protobuf(run.spans))
    assert response.status_code == 200
    assert response.content_type == PB
    assert response.data == b""  # an empty ExportTraceServiceResponse
    detail = client.get("/api/v1/conversations/conv-1", headers=project_key.headers).get_json()
    assert detail["metadata"]["source"] == "otlp"
    user, assistant = detail["messages"]
    assert (user["role"], user["content"]) == ("user", PROMPT)
    assert (assistant["content"], assistant["status"]) == (FINAL, "completed")
    calls = raw_rows(
        app,
        "SELECT round_index, sequence_index, external_tool_call_id, function_name, response "
        "FROM tool_invocation ORDER BY round_index, sequence_index",
    )
    expected = [
        (r, k, call_id, name, result)
        for r, calls_of_round in enumerate(run.rounds)
        for k, (call_id, name, _args, result) in enumerate(calls_of_round)
    ]
    assert calls == expected
    usage = raw_rows(app, "SELECT round_index, input_tokens, output_tokens FROM service_call")
    assert sorted(usage) == [(0, 100, 10), (1, 101, 11), (2, 102, 12)]


def test_json_gzip_chunked_and_the_api_alias(app, live_server, project_key):
    """Node's exporter sends OTLP/JSON in chunks, without a Content-Length."""
    run = agent_run(2, conversation="conv-2")
    body = gzip.compress(traces_json(run.spans))
    response = requests.post(
        live_server + "/api/otlp/v1/traces",
        data=iter([body[:100], body[100:]]),
        headers={
            "Content-Type": "application/json; charset=utf-8",
            "Content-Encoding": "gzip",
            **project_key.headers,
        },
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == JS
    assert response.json() == {}
    assert row_counts(app)["message"] == 2


def test_the_same_run_in_both_encodings_is_stored_once(app, client, project_key):
    run = agent_run(3)
    assert post(client, project_key, traces_protobuf(run.spans)).status_code == 200
    before = _state(app)
    assert post(client, project_key, traces_json(run.spans), content_type=JS).status_code == 200
    assert _state(app) == before


def test_metrics_are_accepted_and_dropped(app, client, project_key):
    response = post(client, project_key, b"", signal="metrics")
    assert (response.status_code, response.data) == (200, b"")
    response = post(
        client, project_key, b'{"resourceMetrics": []}', signal="metrics", content_type=JS
    )
    assert (response.status_code, response.get_json()) == (200, {})
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_span") == [(0,)]


@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc"])
def test_missing_or_unknown_key_is_401_before_the_body_is_read(app, client, header):
    headers = {"Content-Type": JS}
    if header:
        headers["Authorization"] = header
    # A body far over the limit: 401 wins, the body is never read.
    response = client.post("/v1/traces", data=b"x" * 100, headers=headers)
    assert response.status_code == 401
    assert response.get_json()["error"] == "unauthorized"


def test_a_revoked_key_is_401_in_protobuf(app, client, project_key):
    from webapp.db import db, utcnow
    from webapp.models import ApiKey

    with app.app_context():
        db.session.execute(ApiKey.__table__.update().values(revoked_at=utcnow()))
        db.session.commit()
    response = post(client, project_key, b"")
    assert (response.status_code, response.content_type) == (401, PB)
    status = Status()
    status.ParseFromString(response.data)
    assert status.code == 16 and "revoked" in status.message


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "text/plain"}, 415),
        ({"Content-Type": "application/protobuf"}, 415),
        ({"Content-Type": PB, "Content-Encoding": "br"}, 415),
        ({"Content-Type": PB, "Content-Encoding": "gzip"}, 400),  # not gzip data
    ],
)
def test_content_type_and_encoding(app, client, project_key, headers, status):
    response = client.post(
        "/v1/traces", data=b"\x0a\x00", headers={**headers, **project_key.headers}
    )
    assert response.status_code == status


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"\xff\xff\xff\xff", PB),
        (b"\x0a\x05abc", PB),
        (b"{", JS),
        (b"[]", JS),
        (b'{"resourceSpans": 5}', JS),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}', JS),
        ("\ud800".encode("utf-8", "surrogatepass"), JS),
    ],
)
def test_malformed_bodies_are_400_and_the_server_keeps_serving(
    app, client, project_key, body, content_type
):
    response = post(client, project_key, body, content_type=content_type)
    assert response.status_code == 400
    assert response.content_type == content_type
    if content_type == JS:
        assert response.get_json()["error"] == "malformed"
    assert row_counts(app)["conversation"] == 0
    good = post(client, project_key, traces_protobuf(agent_run(9).spans))
    assert good.status_code == 200


@pytest.mark.parametrize("app_config", [{"OTLP_MAX_BODY_BYTES": 2000}])
def test_bodies_over_the_limit_are_413_compressed_or_not(app, client, live_server, project_key):
    big = traces_json(agent_run(4, rounds=3, parallel=3).spans)
    assert len(big) > 2000
    assert post(client, project_key, big, content_type=JS).status_code == 413
    bomb = gzip.compress(b'{"resourceSpans": []' + b" " * 100_000 + b"}")
    assert len(bomb) < 2000
    response = post(client, project_key, bomb, content_type=JS, **{"Content-Encoding": "gzip"})
    assert response.status_code == 413
    chunked = requests.post(
        live_server + "/v1/traces",
        data=iter([big[:1000], big[1000:]]),
        headers={"Content-Type": JS, **project_key.headers},
        timeout=10,
    )
    assert chunked.status_code == 413


def test_rejected_spans_are_counted_and_the_rest_stored(app, client, project_key):
    run = agent_run(5, rounds=2)
    document = json.loads(traces_json(run.spans))
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append({**spans[0], "traceId": "00" * 16})
    spans.append({**spans[0], "spanId": "abc"})
    response = post(client, project_key, json.dumps(document).encode(), content_type=JS)
    assert response.status_code == 200
    partial = response.get_json()["partialSuccess"]
    assert partial["rejectedSpans"] == "2"
    assert "invalid trace id" in partial["errorMessage"]
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_span") == [(len(run.spans),)]

    pb = post(client, project_key, traces_protobuf([make_span(6, 1, "x", 1, 2, {})]))
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(pb.data)
    assert parsed.partial_success.rejected_spans == 0


def test_a_resent_request_changes_nothing_and_answers_the_same(app, client, project_key):
    body = traces_protobuf(agent_run(7).spans)
    first = post(client, project_key, body)
    before = _state(app)
    again = post(client, project_key, body)
    assert (again.status_code, again.data) == (first.status_code, first.data)
    assert _state(app) == before


def test_a_span_resent_with_other_content_keeps_the_first_and_warns(app, client, project_key):
    run = agent_run(8)
    post(client, project_key, traces_protobuf(run.spans))
    before = _state(app)
    changed = run.spans[0]
    changed.attributes["gen_ai.usage.input_tokens"] = 1
    response = post(client, project_key, traces_json([changed]), content_type=JS)
    partial = response.get_json()["partialSuccess"]
    assert partial["rejectedSpans"] == "0"
    assert "different content" in partial["errorMessage"]
    assert _state(app) == before


def _exports(seed: int):
    """A long run's spans and its logs, cut into requests."""
    runs = [
        agent_run(11, rounds=3, conversation="long"),
        agent_run(12, rounds=3, agent=False, per_call_traces=True, tool_spans=False),
        agent_run(13, rounds=2, content=False),
    ]
    spans = [s for r in runs for s in r.spans]
    logs = [
        make_log(11, 11 * 1000 + 10, "gen_ai.user.message", 5, {"content": "ignored: span wins"}),
    ]
    rng = random.Random(seed)
    rng.shuffle(spans)
    cut = rng.randint(1, len(spans) - 1)
    requests = [("traces", traces_protobuf(spans[:cut])), ("traces", traces_protobuf(spans[cut:]))]
    requests.append(("logs", logs_protobuf(logs)))
    rng.shuffle(requests)
    return requests


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_order_batching_and_duplicates_give_the_same_end_state(app, client, project_key, seed):
    for signal, body in _exports(0):
        assert post(client, project_key, body, signal=signal).status_code == 200
    expected = _state(app)
    assert len(expected[1]) == 2 * 2 + 1  # two turns with a user message, one without
    client.application.config["TESTING"] = True
    with app.app_context():
        from webapp.db import db

        for table in ("otel_turn_trace", "otel_turn", "otel_link", "otel_log", "otel_span"):
            db.session.execute(db.text(f"DELETE FROM {table}"))
        db.session.execute(db.text("DELETE FROM conversation"))
        db.session.commit()
    requests = _exports(seed)
    for signal, body in requests + requests[:1]:  # the first one twice
        assert post(client, project_key, body, signal=signal).status_code == 200
    assert _state(app) == expected


def test_logs_before_traces(app, client, project_key):
    llm0 = make_span(30, 1, "chat", 10, 20, {"gen_ai.operation.name": "chat"})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    logs = [
        make_log(30, 1, "gen_ai.user.message", 10, {"content": "hello"}),
        make_log(30, 1, "gen_ai.choice", 20, {"index": 0, "message": {"tool_calls": [call]}}),
    ]
    assert (
        post(client, project_key, logs_json(logs), signal="logs", content_type=JS).status_code
        == 200
    )
    assert row_counts(app)["message"] == 0
    assert post(client, project_key, traces_protobuf([llm0])).status_code == 200
    rows = raw_rows(app, "SELECT role, content, status FROM message ORDER BY role DESC")
    assert rows == [("user", "hello", None), ("assistant", None, "in_progress")]
    assert raw_rows(app, "SELECT function_name, response FROM tool_invocation") == [("f", None)]


def test_a_provisional_conversation_gives_way_to_the_explicit_id(app, client, project_key):
    run = agent_run(40, rounds=2, conversation="explicit")
    agent_span, others = run.spans[-1], run.spans[:-1]
    post(client, project_key, traces_protobuf(others))
    assert raw_rows(app, "SELECT external_id FROM conversation") == [(f"otel-{40:032x}",)]
    post(client, project_key, traces_protobuf([agent_span]))
    assert raw_rows(app, "SELECT external_id FROM conversation") == [("explicit",)]
    assert row_counts(app)["message"] == 2


def test_another_projects_traces_never_join(app, client, project_key, other_project_key):
    run = agent_run(50, rounds=3, agent=False, per_call_traces=True, tool_spans=False)
    post(client, project_key, traces_protobuf(run.spans[:1]))
    post(client, other_project_key, traces_protobuf(run.spans[1:]))
    rows = raw_rows(
        app,
        "SELECT c.project_id, m.status, COUNT(DISTINCT t.round_index) FROM message m "
        "JOIN conversation c ON c.id = m.conversation_id "
        "LEFT JOIN tool_invocation t ON t.message_id = m.id "
        "WHERE m.role = 'assistant' GROUP BY c.project_id, m.status ORDER BY 1",
    )
    # Round 0 alone in the first project (waiting for results); the other project rebuilds
    # its turn from its own spans only (round 0 synthetic, from the later rounds' history).
    assert rows == [
        (project_key.project_id, "in_progress", 1),
        (other_project_key.project_id, "completed", 2),
    ]


def test_statements_per_request_do_not_grow_with_its_size(app, client, project_key, count_queries):
    def spans(first: int, count: int):
        return [s for n in range(first, first + count) for s in agent_run(n, rounds=3).spans]

    post(client, project_key, traces_protobuf(spans(100, 1)))  # warm caches
    with count_queries() as small:
        post(client, project_key, traces_protobuf(spans(200, 1)))
    with count_queries() as large:
        post(client, project_key, traces_protobuf(spans(300, 20)))
    assert large.count == small.count, large.statements
    # Measured: key, rules, reads, the check in the lock, writes (+1 on PostgreSQL: its lock),
    # and the roll-ups' SELECT and INSERT or UPDATE of the tool and the model rows (4).
    assert small.count <= 31, small.statements


def test_stats_say_what_was_received_and_understood(app, client, project_key):
    run = agent_run(60, rounds=2)
    plain = make_span(61, 1, "GET /health", 1, 2, {"http.method": "GET"})
    post(client, project_key, traces_protobuf([*run.spans, plain]))
    post(
        client,
        project_key,
        logs_json([make_log(60, 1, "gen_ai.user.message", 3, {})]),
        signal="logs",
        content_type=JS,
    )
    stats = client.get("/api/v1/otel/stats", headers=project_key.headers).get_json()
    assert stats["spans_received"] == len(run.spans) + 1
    assert stats["spans_understood"] == len(run.spans)
    assert stats["spans_unattached"] == 1
    assert stats["spans_by_class"] == {"llm": 2, "tool": 2, "agent": 1, "other": 1}
    assert (stats["log_records_received"], stats["turns"]) == (1, 1)
    assert stats["last_received_at"] is not None


def test_purge_removes_raw_rows_of_purged_conversations_and_old_unattached_ones(
    app, client, project_key
):
    from webapp.db import db

    post(client, project_key, traces_protobuf(agent_run(70).spans))
    post(client, project_key, traces_protobuf([make_span(71, 1, "GET /", 1, 2, {})]))
    from webapp.cli import main

    runner = app.test_cli_runner()
    result = runner.invoke(main, args=["purge", "--older-than", "1"])
    assert "0 OTLP spans" in result.output
    with app.app_context():
        db.session.execute(db.text("UPDATE conversation SET updated_at = '2000-01-01'"))
        db.session.execute(db.text("UPDATE otel_span SET received_at = '2000-01-01'"))
        db.session.commit()
    result = runner.invoke(main, args=["purge", "--older-than", "1"])
    assert "purged 1 conversations" in result.output, result.output
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_span") == [(0,)]
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_link") == [(0,)]


def test_native_writes_to_an_otlp_message_are_409(app, client, project_key):
    post(client, project_key, traces_protobuf(agent_run(80).spans))
    (assistant_id,) = raw_rows(app, "SELECT external_id FROM message WHERE role = 'assistant'")[0]
    response = client.post(
        "/api/v1/messages/tools",
        json={"messageId": assistant_id, "tools": []},
        headers=project_key.headers,
    )
    # The MessageTool API answers its conflicts as 400s, as unique_sdk expects.
    assert response.status_code == 400
    assert "owned by OTLP" in json.dumps(response.get_json())
    conversation = raw_rows(app, "SELECT external_id FROM conversation")[0][0]
    response = client.post(
        f"/api/v1/conversations/{conversation}/messages",
        json={"messages": [{"id": assistant_id, "role": "assistant", "content": "x"}]},
        headers=project_key.headers,
    )
    assert response.status_code == 409
    assert "owned by OTLP" in json.dumps(response.get_json())


def test_a_run_filling_in_keeps_its_message_rows(app, client, project_key):
    """An open page refreshes messages by row id: a turn that grows is updated in place."""
    run = agent_run(90, rounds=3, agent=False)
    post(client, project_key, traces_protobuf(run.spans[:1]))
    before = raw_rows(app, "SELECT id, external_id, status FROM message ORDER BY id")
    assert [r[2] for r in before] == [None, "in_progress"]
    post(client, project_key, traces_protobuf(run.spans[1:]))
    after = raw_rows(app, "SELECT id, external_id, status FROM message ORDER BY id")
    assert [r[:2] for r in after] == [r[:2] for r in before]
    assert after[1][2] == "completed"
    assert raw_rows(app, "SELECT COUNT(*) FROM tool_invocation WHERE response IS NOT NULL") == [
        (4,)
    ]


def test_the_openapi_document_lists_the_otlp_endpoints(client):
    spec = client.get("/api/openapi.json").get_json()
    for prefix in ("", "/api/otlp"):
        for signal in ("traces", "logs", "metrics"):
            operation = spec["paths"][f"{prefix}/v1/{signal}"]["post"]
            assert set(operation["requestBody"]["content"]) == {PB, JS}
            assert operation["security"] == [{"bearer": []}]
    assert "/api/v1/otel/stats" in spec["paths"]


def test_concurrent_exports_end_in_the_state_of_serial_ones(
    app, client, live_server, project_key, other_project_key
):
    """Parts of the same runs posted at once from several connections: the write lock (SQLite)
    or the trace locks (PostgreSQL) and the check before writing keep the projection whole."""
    from concurrent.futures import ThreadPoolExecutor

    runs = [
        agent_run(100, rounds=3, conversation="shared"),
        agent_run(101, rounds=3, conversation="shared"),
        agent_run(102, rounds=3, agent=False, per_call_traces=True, tool_spans=False),
    ]
    bodies = [
        traces_protobuf(part)
        for run in runs
        for part in (run.spans[: len(run.spans) // 2], run.spans[len(run.spans) // 2 :])
    ]

    def send(body: bytes) -> int:
        for _ in range(20):  # an exporter retries a 503
            response = requests.post(
                live_server + "/v1/traces",
                data=body,
                headers={"Content-Type": PB, **project_key.headers},
                timeout=30,
            )
            if response.status_code != 503:
                return response.status_code
        return 503

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        assert list(pool.map(send, bodies)) == [200] * len(bodies)
    for body in bodies:
        assert post(client, other_project_key, body).status_code == 200
    assert _state(app, project_key.project_id) == _state(app, other_project_key.project_id)


@pytest.mark.parametrize("app_config", [{"MAX_RESULT_BYTES": 40}])
def test_a_result_over_the_limit_is_cut_with_a_warning_and_a_resend_answers_the_same(
    app, client, project_key
):
    run = agent_run(110, rounds=2, parallel=1)
    long_result = "é" * 30  # 60 bytes: cut at a character boundary
    for span in run.spans:
        span.attributes = json.loads(
            json.dumps(span.attributes).replace("result 110/0/0", long_result)
        )
    body = traces_json(run.spans)
    first = post(client, project_key, body, content_type=JS)
    assert "over the limit of 40 bytes" in first.get_json()["partialSuccess"]["errorMessage"]
    again = post(client, project_key, body, content_type=JS)
    assert again.get_json() == first.get_json()
    ((response, redactions),) = raw_rows(app, "SELECT response, redactions FROM tool_invocation")
    assert response == "é" * 20
    names = json.loads(redactions) if isinstance(redactions, str) else redactions
    assert "otlp:truncated" in names


def test_metrics_that_are_not_an_export_request_are_400(client, project_key):
    assert post(client, project_key, b"\x00", signal="metrics", content_type=JS).status_code == 400
    assert post(client, project_key, b"\xff\xff", signal="metrics").status_code == 400
