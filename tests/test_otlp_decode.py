"""Reading OTLP export requests: protobuf and OTLP/JSON give the same values
(docs/otlp-mapping.md, 'Decoding')."""

from __future__ import annotations

import base64
import json

import pytest

from tests.otlp_support import (
    agent_run,
    logs_json,
    logs_protobuf,
    make_log,
    traces_json,
    traces_protobuf,
)
from webapp.ingest.otlp import json_reader, protobuf_reader
from webapp.ingest.otlp.records import TOO_DEEP, DecodeError


def _spans_json(spans: list[dict], **scope: object) -> bytes:
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans, **scope}]}]}).encode()


def _span(**fields: object) -> dict:
    return {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "s",
        **fields,
    }


def test_both_encodings_give_the_same_spans_and_logs():
    run = agent_run(1)
    logs = [
        make_log(1, 1010, "gen_ai.user.message", 5, {"content": "hi"}, {"n": 1}),
        make_log(1, 1010, "gen_ai.choice", 6, {"index": 0, "message": {"content": "x"}}),
    ]
    assert protobuf_reader.decode_traces(traces_protobuf(run.spans)).spans == (
        json_reader.decode_traces(traces_json(run.spans)).spans
    )
    assert protobuf_reader.decode_logs(logs_protobuf(logs)).logs == (
        json_reader.decode_logs(logs_json(logs)).logs
    )


def test_json_numbers_and_strings_enum_names_and_base64_ids_are_read():
    trace_b64 = base64.b64encode(bytes.fromhex("0af7651916cd43dd8448eb211c80319c")).decode()
    body = _spans_json(
        [
            _span(
                traceId=trace_b64,
                kind="SPAN_KIND_CLIENT",
                startTimeUnixNano=1_700_000_000_123_456_789,
                endTimeUnixNano="1700000000223456789",
                status={"code": "STATUS_CODE_ERROR", "message": "boom"},
                flags=257,
                unknownField={"ignored": True},
                attributes=[
                    {"key": "n", "value": {"intValue": 7}},
                    {"key": "s", "value": {"intValue": "8"}},
                    {"key": "d", "value": {"doubleValue": "NaN"}},
                    {"key": "e", "value": {}},
                    {"key": "dup", "value": {"stringValue": "first"}},
                    {"key": "dup", "value": {"stringValue": "second"}},
                    {
                        "key": "kv",
                        "value": {
                            "kvlistValue": {
                                "values": [
                                    {
                                        "key": "a",
                                        "value": {"arrayValue": {"values": [{"boolValue": True}]}},
                                    }
                                ]
                            }
                        },
                    },
                ],
            )
        ]
    )
    (span,) = json_reader.decode_traces(body).spans
    assert span.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert (span.kind, span.status_code, span.status_message) == (3, 2, "boom")
    assert span.start_ns == 1_700_000_000_123_456_789
    assert span.end_ns == 1_700_000_000_223_456_789
    assert span.attributes == {
        "n": 7,
        "s": 8,
        "d": "NaN",
        "e": None,
        "dup": "second",
        "kv": {"a": [True]},
    }


def test_pre_1_0_instrumentation_library_spans_are_read():
    body = json.dumps(
        {
            "resourceSpans": [
                {
                    "instrumentationLibrarySpans": [
                        {"instrumentationLibrary": {"name": "old"}, "spans": [_span()]}
                    ]
                }
            ]
        }
    ).encode()
    (span,) = json_reader.decode_traces(body).spans
    assert span.scope_name == "old"


@pytest.mark.parametrize(
    ("trace_id", "span_id"),
    [
        ("00000000000000000000000000000000", "b7ad6b7169203331"),
        ("0af7651916cd43dd8448eb211c8031", "b7ad6b7169203331"),
        ("0af7651916cd43dd8448eb211c80319c", "0000000000000000"),
        ("0af7651916cd43dd8448eb211c80319c", "zz"),
        ("0af7651916cd43dd8448eb211c80319c", None),
    ],
)
def test_spans_with_invalid_ids_are_rejected_and_the_rest_kept(trace_id, span_id):
    body = _spans_json([_span(traceId=trace_id, spanId=span_id), _span(spanId="b7ad6b7169203332")])
    decoded = json_reader.decode_traces(body)
    assert [s.span_id for s in decoded.spans] == ["b7ad6b7169203332"]
    assert decoded.rejected == 1
    assert "invalid" in decoded.errors[0]


def test_any_value_nesting_is_capped():
    value: dict = {"stringValue": "leaf"}
    for _ in range(40):
        value = {"arrayValue": {"values": [value]}}
    body = _spans_json([_span(attributes=[{"key": "deep", "value": value}])])
    (span,) = json_reader.decode_traces(body).spans
    node = span.attributes["deep"]
    depth = 0
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert node == TOO_DEEP
    assert depth == 32


def test_log_records_read_the_event_name_from_the_attribute_and_fall_back_to_observed_time():
    body = json.dumps(
        {
            "resourceLogs": [
                {
                    "scopeLogs": [
                        {
                            "logRecords": [
                                {
                                    "observedTimeUnixNano": "42",
                                    "traceId": "",
                                    "spanId": "",
                                    "body": {},
                                    "attributes": [
                                        {
                                            "key": "event.name",
                                            "value": {"stringValue": "gen_ai.choice"},
                                        }
                                    ],
                                }
                            ]
                        }
                    ]
                }
            ]
        }
    ).encode()
    (record,) = json_reader.decode_logs(body).logs
    assert (record.event_name, record.time_ns, record.body) == ("gen_ai.choice", 42, None)
    assert (record.trace_id, record.span_id) == ("", "")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'"text"',
        b'{"resourceSpans": {}}',
        b'{"resourceSpans": [1]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}',
        b"\xff\xfe",
        b"[" * 100_000,
    ],
)
def test_malformed_json_is_a_decode_error(body):
    with pytest.raises(DecodeError):
        json_reader.decode_traces(body)


@pytest.mark.parametrize("body", [b"\xff\xff\xff", b"\x0a\x05abc", b"\x0a" + b"\xff" * 10])
def test_malformed_protobuf_is_a_decode_error(body):
    with pytest.raises(DecodeError):
        protobuf_reader.decode_traces(body)


def test_an_empty_request_is_valid_in_both_encodings():
    assert protobuf_reader.decode_traces(b"").spans == []
    assert json_reader.decode_traces(b"{}").spans == []
    assert json_reader.decode_logs(b"{}").logs == []


@pytest.mark.parametrize(
    "bad",
    [
        {"traceId": 5, "name": 3},
        {"startTimeUnixNano": "soon"},
        {"attributes": {"key": "k"}},
        {"kind": "SPAN_KIND_NONSENSE"},
    ],
)
def test_a_span_with_values_of_the_wrong_shape_is_rejected_alone(bad):
    """One span's values: the span is rejected (partialSuccess), not the whole export."""
    body = _spans_json([_span(**bad), _span(spanId="b7ad6b7169203332")])
    decoded = json_reader.decode_traces(body)
    assert [s.span_id for s in decoded.spans] == ["b7ad6b7169203332"]
    assert decoded.rejected == 1
