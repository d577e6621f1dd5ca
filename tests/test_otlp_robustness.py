"""Hostile OTLP input: any attribute values, any message shapes, any ids. Reading, normalizing,
redacting and projecting never fail with anything but a DecodeError (a 400)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapp.ingest.otlp import json_reader
from webapp.ingest.otlp.batch import prepare_logs, prepare_spans
from webapp.ingest.otlp.projection import project
from webapp.ingest.otlp.records import DecodeError
from webapp.redaction import Rule, compile_rules

RULES = compile_rules(
    (Rule("pii", "mask", ("email", "api_key")), Rule("p", "redact_paths", ("a.b",)))
)

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_call", "tool_call_response", "blob", 7])},
    optional={
        "content": _json,
        "id": _json,
        "name": _json,
        "arguments": _json,
        "response": _json,
        "result": _json,
    },
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool", "x", None])},
    optional={"parts": st.lists(_part, max_size=4), "content": _json, "tool_calls": _json},
)
_messages = st.one_of(
    st.lists(_message, max_size=4).map(json.dumps), st.text(max_size=30), _json.map(json.dumps)
)


def _any_value(value):
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": value}
    if isinstance(value, float):
        return {"doubleValue": value if value == value and abs(value) != float("inf") else "NaN"}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {
        "kvlistValue": {"values": [{"key": k, "value": _any_value(v)} for k, v in value.items()]}
    }


_keys = st.sampled_from(
    [
        "gen_ai.operation.name",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.tool.call.id",
        "gen_ai.tool.name",
        "gen_ai.tool.definitions",
        "gen_ai.usage.input_tokens",
        "gen_ai.response.finish_reasons",
        "gen_ai.conversation.id",
        "gen_ai.prompt.0.role",
        "gen_ai.prompt.0.content",
        "gen_ai.completion.0.tool_calls.1.arguments",
        "llm.input_messages.0.message.tool_calls.0.tool_call.id",
        "llm.tools.0.tool.json_schema",
        "openinference.span.kind",
        "input.value",
        "output.value",
        "session.id",
    ]
)
_operation = st.sampled_from(["chat", "execute_tool", "invoke_agent", "embeddings", "TOOL"])


@st.composite
def _span(draw, n):
    attributes = draw(st.dictionaries(_keys, st.one_of(_json, _messages), max_size=6))
    attributes.setdefault("gen_ai.operation.name", draw(_operation))
    return {
        "traceId": f"{draw(st.integers(1, 3)):032x}",
        "spanId": f"{n + 1:016x}",
        "parentSpanId": draw(st.sampled_from(["", f"{1:016x}", f"{2:016x}", "zz"])),
        "name": draw(st.text(max_size=10)),
        "startTimeUnixNano": draw(st.integers(0, 10**19)),
        "endTimeUnixNano": draw(st.integers(0, 10**19)),
        "status": {"code": draw(st.integers(0, 2))},
        "attributes": [{"key": k, "value": _any_value(v)} for k, v in attributes.items()],
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 6).flatmap(lambda k: st.tuples(*[_span(n) for n in range(k)])))
def test_any_spans_are_read_and_projected_without_error(spans):
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}).encode()
    try:
        decoded = json_reader.decode_traces(body)
    except DecodeError:
        return
    batch = prepare_spans(decoded, RULES)
    plans = project([row.record for row in batch.spans])
    for conversation in plans:
        json.dumps([t.digest() for t in conversation.turns])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "gen_ai.user.message",
                    "gen_ai.tool.message",
                    "gen_ai.choice",
                    "gen_ai.assistant.message",
                    "gen_ai.client.inference.operation.details",
                    "gen_ai.other",
                ]
            ),
            _json,
        ),
        max_size=6,
    )
)
def test_any_log_bodies_are_read_without_error(records):
    body = json.dumps(
        {
            "resourceLogs": [
                {
                    "scopeLogs": [
                        {
                            "logRecords": [
                                {
                                    "traceId": f"{1:032x}",
                                    "spanId": f"{1:016x}",
                                    "eventName": name,
                                    "body": _any_value(value),
                                    "attributes": [
                                        {"key": "gen_ai.input.messages", "value": _any_value(value)}
                                    ],
                                }
                                for name, value in records
                            ]
                        }
                    ]
                }
            ]
        }
    ).encode()
    batch = prepare_logs(json_reader.decode_logs(body), RULES)
    span = {
        "class": "llm",
        "trace_id": f"{1:032x}",
        "span_id": f"{1:016x}",
        "parent_span_id": "",
        "name": "chat",
        "service": "",
        "start_ns": 1,
        "end_ns": 2,
        "status": 0,
        "status_message": "",
    }
    project([span], [row.record for row in batch.logs])
