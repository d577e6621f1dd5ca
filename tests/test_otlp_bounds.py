"""The span store is bounded (issue 22, item 4): every stored value of an export is cut to a
documented setting, what was cut is marked (`toolscope.truncated`) and shown, and the trace view
and its JSON twin stay light. On both databases."""

from __future__ import annotations

import gzip
import json

import pytest
from dashboard_support import dashboard_fixture  # noqa: F401

from tests.api_support import raw_rows
from tests.otlp_support import T0, agent_run, make_log, make_span, traces_json, traces_protobuf
from tests.test_otlp_partial import post
from webapp.ingest.otlp.batch import Batch, SpanRow
from webapp.ingest.otlp.bounds import MARKER, Limits, bound_batch

PB = "application/x-protobuf"
MIB = 1024 * 1024


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def _span_row(app, span_id: str) -> dict:
    ((name, attributes, events, record),) = raw_rows(
        app,
        f"SELECT name, attributes, events, record FROM otel_span WHERE span_id = '{span_id}'",
    )
    return {
        "name": name,
        "attributes": _json(attributes),
        "events": _json(events),
        "record": _json(record),
    }


def _conversation_id(app, external_id: str) -> int:
    ((row_id,),) = raw_rows(app, f"SELECT id FROM conversation WHERE external_id = '{external_id}'")
    return row_id


def test_a_30_mib_attribute_is_stored_cut_and_marked_and_the_trace_stays_light(
    app, client, dashboard, project_key
):
    run = agent_run(301, rounds=1, conversation="c-big")
    llm = next(s for s in run.spans if s.name.startswith("chat"))
    llm.attributes["app.dump"] = "x" * (30 * MIB)
    llm.events = [{"name": "e", "time_ns": T0, "attributes": {"body": "é" * (MIB // 2)}}]
    body = gzip.compress(traces_protobuf(run.spans))
    assert len(body) < 100_000
    response = client.post(
        "/v1/traces",
        data=body,
        headers={"Content-Type": PB, "Content-Encoding": "gzip", **project_key.headers},
    )
    assert response.status_code == 200

    row = _span_row(app, llm.span_id)
    limit = app.config["OTLP_MAX_ATTRIBUTE_BYTES"]
    assert row["attributes"]["app.dump"] == "x" * limit
    event_text = row["events"][0]["attributes"]["body"]
    assert len(event_text.encode()) <= limit and set(event_text) == {"é"}
    marker = row["attributes"][MARKER]
    assert marker["attributes.app.dump"] == 30 * MIB
    assert marker["events.0.attributes.body"] == MIB
    stored = sum(
        len(json.dumps(_json(v), ensure_ascii=False).encode())
        for r in raw_rows(app, "SELECT attributes, events FROM otel_span")
        for v in r
    )
    assert stored < 4 * limit  # not 30 MiB, nor twice that
    # The conversation was still made.
    assert raw_rows(app, "SELECT COUNT(*) FROM message") == [(2,)]

    conversation_id = _conversation_id(app, "c-big")
    twin = dashboard.get(f"/conversations/{conversation_id}/trace.json")
    assert twin.status_code == 200 and len(twin.data) < 50_000
    (shown,) = [s for s in twin.get_json()["spans"] if s["span_id"] == llm.span_id]
    assert shown["attributes_cut"] and shown["truncated"]["attributes.app.dump"] == 30 * MIB
    assert len(shown["attributes"]["app.dump"]) < 1_000
    page = dashboard.get(f"/conversations/{conversation_id}/trace")
    assert len(page.data) < 200_000
    assert b"cut when stored" in page.data and shown["span_url"].encode() in page.data
    full = dashboard.get(shown["span_url"] + ".json").get_json()
    assert full["span"]["attributes"]["app.dump"] == "x" * limit
    assert full["truncated"]["attributes.app.dump"] == 30 * MIB
    assert b"Cut when stored" in dashboard.get(shown["span_url"]).data
    other = dashboard.get(f"/conversations/{conversation_id}/trace/{'0' * 31}1/{llm.span_id}.json")
    assert other.status_code == 404


@pytest.mark.parametrize("app_config", [{"MAX_RESULT_BYTES": 1000}])
def test_a_long_tool_result_is_cut_in_the_raw_span_as_in_the_call_row(app, client, project_key):
    run = agent_run(302, rounds=2, parallel=1, conversation="c-result")
    long_result = "r" * 10_000
    for span in run.spans:
        span.attributes = json.loads(
            json.dumps(span.attributes).replace("result 302/0/0", long_result)
        )
    response = post(client, project_key, traces_json(run.spans), content_type="application/json")
    message = response.get_json()["partialSuccess"]["errorMessage"]
    assert "stored cut" in message and MARKER in message
    ((text, redactions),) = raw_rows(app, "SELECT response, redactions FROM tool_invocation")
    assert text == "r" * 1000 and "otlp:truncated" in _json(redactions)
    records = [_json(r[0]) for r in raw_rows(app, "SELECT record FROM otel_span")]
    tool = next(r for r in records if r["class"] == "tool")
    assert len(tool["tool"]["result"]) == 1001  # cut just past the limit: the call row cuts it
    # The model calls' messages, longer than the parse limit, stay raw text: cut too.
    assert all(len(json.dumps(r)) < 20_000 for r in records)
    for (attributes,) in raw_rows(app, "SELECT attributes FROM otel_span"):
        assert len(json.dumps(_json(attributes))) < 2 * app.config["OTLP_MAX_ATTRIBUTE_BYTES"]
    # A re-sent export is the same export: no "different content", the same answer.
    again = post(client, project_key, traces_json(run.spans), content_type="application/json")
    assert again.get_json() == response.get_json()


@pytest.mark.parametrize(
    "app_config", [{"OTLP_MAX_ATTRIBUTE_BYTES": 100, "OTLP_MAX_RAW_SPAN_BYTES": 20_000}]
)
def test_names_keys_and_the_raw_part_are_bounded(app, client, project_key):
    attributes = {f"k{n:03}": "v" * 90 for n in range(400)}  # 40 KB: over the raw limit
    attributes["x" * 300] = "long key"
    span = make_span(303, 1, "n" * 1000, T0, T0 + 1, attributes)
    response = post(client, project_key, traces_protobuf([span]))
    assert response.status_code == 200
    row = _span_row(app, span.span_id)
    assert row["name"] == "n" * 100
    stored = row["attributes"]
    assert len(json.dumps(stored)) <= 20_000
    marker = stored[MARKER]
    assert marker["name"] == 1000
    assert marker["left out"]  # the attributes past the raw budget, by name
    assert "k000" in stored and "k399" not in stored


@pytest.mark.parametrize("app_config", [{"OTLP_MAX_ATTRIBUTE_BYTES": 100}])
def test_log_record_attributes_are_bounded(app, client, project_key):
    log = make_log(304, 1, "gen_ai.user.message", T0, {"content": "hi"}, {"big": "b" * 5000})
    from tests.otlp_support import logs_protobuf

    response = post(client, project_key, logs_protobuf([log]), signal="logs")
    assert response.status_code == 200
    ((attributes,),) = raw_rows(app, "SELECT attributes FROM otel_log")
    attributes = _json(attributes)
    assert attributes["big"] == "b" * 100
    assert attributes[MARKER] == {"attributes.big": 5000}


def test_results_in_messages_are_cut_just_past_the_limit_and_other_texts_at_it():
    """What the call row's own cut then sees over the limit, cuts and marks `otlp:truncated`."""
    response = {"type": "tool_call_response", "id": "c", "response": "é" * 800}
    record = {
        "class": "llm",
        "input": [
            {"role": "tool", "parts": [response]},
            {"role": "user", "parts": [{"type": "text", "content": "t" * 5000}]},
        ],
    }
    row = SpanRow(
        *["0" * 32, "1" * 16, "", "s", 1, 0, 0, 0, "", "", "", ""],
        resource={},
        attributes={},
        events=[],
        links=[],
        record=record,
        digest="",
    )
    batch = Batch(spans=[row])
    bound_batch(batch, Limits(attribute_bytes=100, raw_bytes=10_000, result_bytes=1000))
    assert response["response"] == "é" * 501  # 1002 bytes: the call row cuts it, and marks it
    assert record["input"][1]["parts"][0]["content"] == "t" * 1000
    assert set(row.attributes[MARKER]) == {
        "record.input.0.parts.0.response",
        "record.input.1.parts.0.content",
    }
    assert batch.warnings
