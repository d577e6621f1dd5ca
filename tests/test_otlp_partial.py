"""One bad span does not cost the batch (issue 22, item 3): values a database cannot hold, or that
the OTLP types do not allow, are refused per span (partialSuccess) or repaired and counted in the
answer's warnings; nothing answers 500, and every error is a google.rpc.Status in the request's
encoding. On both databases."""

from __future__ import annotations

import json

import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.api_support import raw_rows
from tests.otlp_support import (
    T0,
    agent_run,
    logs_protobuf,
    make_log,
    make_span,
    traces_json,
    traces_protobuf,
)
from webapp.ingest.otlp import json_reader, protobuf_reader
from webapp.ingest.otlp.records import TOO_DEEP

PB = "application/x-protobuf"
JS = "application/json"


def post(client, key, body: bytes, *, signal="traces", content_type=PB):
    headers = {"Content-Type": content_type, "Authorization": f"Bearer {key.key}"}
    return client.post(f"/v1/{signal}", data=body, headers=headers)


def _partial_pb(response) -> ExportTraceServiceResponse:
    assert (response.status_code, response.content_type) == (200, PB), response.data
    parsed = ExportTraceServiceResponse()
    parsed.ParseFromString(response.data)
    return parsed


def _stored_span_ids(app) -> set[str]:
    return {r[0] for r in raw_rows(app, "SELECT span_id FROM otel_span")}


# --- Times ------------------------------------------------------------------------------------


def _json_spans(spans) -> tuple[dict, list[dict]]:
    document = json.loads(traces_json(spans))
    return document, document["resourceSpans"][0]["scopeSpans"][0]["spans"]


def test_a_mixed_json_batch_keeps_the_good_spans_and_reports_the_bad_ones(
    app, client, project_key
):
    run = agent_run(201, conversation="conv-201")
    bad_times = [
        {"startTimeUnixNano": "9223372036854775808"},  # 2^63: a valid fixed64, too big to store
        {"endTimeUnixNano": "99999999999999999999"},  # past fixed64 itself
        {"startTimeUnixNano": "-5"},
        {"startTimeUnixNano": 1.5},
        {"endTimeUnixNano": "soon"},
        {"startTimeUnixNano": str(T0 + 10), "endTimeUnixNano": str(T0)},  # ends before it starts
    ]
    document, spans = _json_spans(run.spans)
    good = len(spans)
    for n, fields in enumerate(bad_times):
        spans.append({**spans[0], "spanId": f"{0xBAD0 + n:016x}", "name": f"bad {n}", **fields})
    response = post(client, project_key, json.dumps(document).encode(), content_type=JS)
    assert (response.status_code, response.content_type) == (200, JS)
    partial = response.get_json()["partialSuccess"]
    assert partial["rejectedSpans"] == str(len(bad_times))
    assert "out of range" in partial["errorMessage"]
    assert "bad 0" in partial["errorMessage"]
    assert _stored_span_ids(app) == {s.span_id for s in run.spans}
    assert len(_stored_span_ids(app)) == good
    detail = client.get("/api/v1/conversations/conv-201", headers=project_key.headers)
    assert detail.status_code == 200
    # Not a single value of the refused spans was stored as another one.
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_span WHERE start_ns < 0 OR end_ns < 0") == [
        (0,)
    ]


def test_a_mixed_protobuf_batch_keeps_the_good_spans_and_reports_the_bad_ones(
    app, client, project_key
):
    run = agent_run(202, conversation="conv-202")
    bad = [
        make_span(202, 0xBAD1, "bad start", 2**63, 2**63 + 5, {}),
        make_span(202, 0xBAD2, "bad end", T0, 2**64 - 1, {}),
        make_span(202, 0xBAD3, "backwards", T0 + 10, T0, {}),
    ]
    response = post(client, project_key, traces_protobuf([*run.spans, *bad]))
    partial = _partial_pb(response).partial_success
    assert partial.rejected_spans == 3
    assert "bad start" in partial.error_message and "before its start" in partial.error_message
    assert _stored_span_ids(app) == {s.span_id for s in run.spans}
    assert client.get("/api/v1/conversations/conv-202", headers=project_key.headers).status_code
    assert raw_rows(app, "SELECT COUNT(*) FROM message") == [(2,)]


def test_a_log_record_with_a_time_past_2_63_is_rejected_alone(app, client, project_key):
    logs = [
        make_log(203, 1, "gen_ai.user.message", T0, {"content": "hi"}),
        make_log(203, 1, "gen_ai.user.message", 2**63, {"content": "later"}),
    ]
    response = post(client, project_key, logs_protobuf(logs), signal="logs")
    assert response.status_code == 200
    parsed = ExportLogsServiceResponse()
    parsed.ParseFromString(response.data)
    assert parsed.partial_success.rejected_log_records == 1
    assert raw_rows(app, "SELECT time_ns FROM otel_log") == [(T0,)]


# --- Values JSON allows and OTLP does not ------------------------------------------------------


def test_lone_surrogates_are_stored_as_replacement_characters(app, client, project_key):
    """A JavaScript exporter cutting a string inside an emoji sends half a surrogate pair."""
    run = agent_run(204, rounds=1, conversation="conv-204", prompt="weather \ud83d")
    for span in run.spans:
        span.attributes["app.note"] = "cut \ud83d"
        span.name += " \udc00"
    body = traces_json(run.spans)
    assert b"\\ud83d" in body
    response = post(client, project_key, body, content_type=JS)
    assert response.status_code == 200, response.data
    partial = response.get_json()["partialSuccess"]
    assert partial["rejectedSpans"] == "0"
    assert "surrogate" in partial["errorMessage"]
    assert len(_stored_span_ids(app)) == len(run.spans)
    (user,) = raw_rows(app, "SELECT content FROM message WHERE role = 'user'")
    assert user == ("weather \ufffd",)
    names = {r[0] for r in raw_rows(app, "SELECT name FROM otel_span")}
    assert all(name.endswith(" \ufffd") for name in names)
    attributes = [r[0] for r in raw_rows(app, "SELECT attributes FROM otel_span")]
    notes = {(json.loads(a) if isinstance(a, str) else a)["app.note"] for a in attributes}
    assert notes == {"cut \ufffd"}
    # A valid pair stays the emoji it is.
    decoded = json_reader.decode_traces(traces_json([make_span(1, 1, "\U0001f600", 1, 2, {})]))
    assert decoded.spans[0].name == "\U0001f600" and not decoded.warnings


@pytest.mark.parametrize(
    ("sent", "stored"),
    [("99999999999999999999", "99999999999999999999"), (1.5, "1.5"), ("many", "many")],
)
def test_an_int_value_that_is_not_an_int64_is_kept_as_the_text_sent(
    app, client, project_key, sent, stored
):
    document, spans = _json_spans([make_span(205, 1, "s", T0, T0 + 1, {})])
    spans[0]["attributes"] = [{"key": "n", "value": {"intValue": sent}}]
    response = post(client, project_key, json.dumps(document).encode(), content_type=JS)
    assert response.status_code == 200
    assert "not a 64-bit integer" in response.get_json()["partialSuccess"]["errorMessage"]
    (attributes,) = raw_rows(app, "SELECT attributes FROM otel_span")[0]
    attributes = json.loads(attributes) if isinstance(attributes, str) else attributes
    assert attributes["n"] == stored


# --- Nesting: protobuf cuts where OTLP/JSON cuts -----------------------------------------------


def _nested(kind: str, depth: int) -> dict | list | str:
    value: dict | list | str = "leaf"
    for _ in range(depth):
        value = {"k": value} if kind == "kvlist" else [value]
    return value


def _depth(value) -> tuple[int, object]:
    depth = 0
    while isinstance(value, dict | list):
        value = value["k"] if isinstance(value, dict) else value[0]
        depth += 1
    return depth, value


@pytest.mark.parametrize("kind", ["kvlist", "array"])
def test_deep_nesting_in_protobuf_is_cut_at_32_levels_as_in_json(app, client, project_key, kind):
    deep = make_span(206, 1, "deep", T0, T0 + 1, {"deep": _nested(kind, 120), "flat": 1})
    deep.events = [{"name": "e", "time_ns": T0, "attributes": {"deep": _nested(kind, 120)}}]
    good = make_span(206, 2, "good", T0, T0 + 1, {"x": "y"})
    body = traces_protobuf([deep, good])
    with pytest.raises(Exception, match=r"MaxDepth|recursion|parsing"):
        ExportTraceServiceRequest().ParseFromString(body)  # what the runtime alone does
    from_pb = protobuf_reader.decode_traces(body).spans
    from_json = json_reader.decode_traces(traces_json([deep, good])).spans
    assert from_pb == from_json
    assert _depth(from_pb[0].attributes["deep"]) == (32, TOO_DEEP)
    assert _depth(from_pb[0].events[0]["attributes"]["deep"]) == (32, TOO_DEEP)

    response = post(client, project_key, body)
    assert _partial_pb(response).partial_success.rejected_spans == 0
    assert _stored_span_ids(app) == {deep.span_id, good.span_id}


def test_a_body_that_is_not_protobuf_is_still_400(client, project_key):
    value = AnyValue()
    value.string_value = "x"
    broken = b"\x0a\xff\xff\xff\xff\x0f" + value.SerializeToString()
    response = post(client, project_key, broken)
    assert response.status_code == 400
    status = Status()
    status.ParseFromString(response.data)
    assert status.code == 3


# --- Every error is a Status --------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [PB, JS])
def test_unforeseen_errors_answer_a_status_in_the_request_encoding(
    app, client, project_key, monkeypatch, content_type
):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("webapp.api.otlp.receive", broken)
    body = traces_protobuf([make_span(207, 1, "s", T0, T0 + 1, {})])
    if content_type == JS:
        body = traces_json([make_span(207, 1, "s", T0, T0 + 1, {})])
    response = post(client, project_key, body, content_type=content_type)
    assert response.status_code == 500
    assert response.content_type == content_type
    if content_type == PB:
        status = Status()
        status.ParseFromString(response.data)
        assert status.code == 13
    else:
        assert response.get_json()["code"] == 13
    assert b"<html" not in response.data.lower()


@pytest.mark.parametrize("content_type", [PB, JS])
def test_flask_errors_on_otlp_paths_are_a_status(client, content_type):
    response = client.get("/v1/traces", headers={"Content-Type": content_type})
    assert response.status_code == 405
    assert response.content_type == content_type
    assert "Allow" in response.headers
    if content_type == JS:
        assert response.get_json()["code"] == 12
