"""The projection's rules for the shapes of issue 21's frameworks, on plain records (the real
producers run in tests/test_otlp_frameworks_*.py):

- one model call is one round, whoever reports it
  (docs/otlp-mapping.md, 'One model call, one round');
- the Vercel AI SDK's `ai.*` spans (docs/otlp-mapping.md, 'The Vercel AI SDK');
- span events read as log records (docs/otlp-mapping.md, 'Span events read as log records'),
  with Bedrock Converse blocks (docs/otlp-mapping.md, 'The message model');
- an execution span of a tool never offered is not a call
  (docs/otlp-mapping.md, 'Execution spans that are not calls').
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.otlp_support import calls_message, make_span, results_message, text
from webapp.ingest.otlp.batch import prepare_spans
from webapp.ingest.otlp.links import record_links
from webapp.ingest.otlp.messages import content_parts
from webapp.ingest.otlp.normalize import normalize_span
from webapp.ingest.otlp.projection import project
from webapp.ingest.otlp.records import Decoded
from webapp.redaction import NO_RULES

MS = 1_000_000
WEATHER = {"city": "Paris", "forecast": "sunny"}
TOOLS = json.dumps(
    [{"name": n, "description": n, "parameters": {"type": "object"}} for n in ("get_weather",)]
)


def _plans(spans):
    return project([normalize_span(s) for s in spans])


def _anthropic_reports(content_on_sdk: bool, nested: bool) -> list:
    """One run of two model calls, each reported by the SDK and by an instrumentation: in
    traces of their own (OpenLLMetry) or the SDK's span under the instrumentation's (nested)."""
    spans = []
    requests = [
        ([text("user", "weather?")], [calls_message([("toolu_1", "get_weather", {"city": "P"})])]),
        (
            [
                text("user", "weather?"),
                calls_message([("toolu_1", "get_weather", {"city": "P"})]),
                results_message([("toolu_1", json.dumps(WEATHER))], role="user"),
            ],
            [text("assistant", "Sunny.")],
        ),
    ]
    for r, (inputs, outputs) in enumerate(requests):
        start = (r + 1) * 1000 * MS
        content = {
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        }
        outer = make_span(
            10 + r,
            100 + r,
            "anthropic.chat",
            start,
            start + 500 * MS,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "claude-x",
                "gen_ai.response.id": f"msg_{r}",
                "gen_ai.usage.input_tokens": 10 + r,
                "gen_ai.usage.output_tokens": 6,  # one too many: a wrapper's stream count
                "gen_ai.tool.definitions": TOOLS,
                **content,
            },
        )
        sdk = make_span(
            10 + r if nested else 20 + r,
            200 + r,
            "anthropic.messages.create",
            start + 10 * MS,
            start + 490 * MS,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "claude-x",
                "gen_ai.response.id": f"msg_{r}",
                "gen_ai.usage.input_tokens": 10 + r,
                "gen_ai.usage.output_tokens": 5,
                "gen_ai.conversation.id": "conv-1",
                **(content if content_on_sdk else {}),
            },
            parent=100 + r if nested else None,
        )
        spans += [outer, sdk]
    return spans


def _summary(plans) -> list:
    return [
        (
            c.external_id,
            [
                (
                    t.user_content,
                    t.assistant_content,
                    [
                        (
                            r.span_id,
                            (r.usage.input_tokens, r.usage.output_tokens) if r.usage else None,
                            [(k.external_id, k.function_name, k.response) for k in r.calls],
                        )
                        for r in t.rounds
                    ],
                    t.traces,
                )
                for t in c.turns
            ],
        )
        for c in plans
    ]


@settings(max_examples=40, deadline=None)
@given(
    content_on_sdk=st.booleans(),
    nested=st.booleans(),
    order=st.permutations(range(4)),
)
def test_a_model_call_reported_twice_is_one_round(content_on_sdk, nested, order):
    spans = _anthropic_reports(content_on_sdk, nested)
    plans = _plans([spans[i] for i in order])
    assert _summary(plans) == _summary(_plans(spans))  # whatever the order
    (conversation,) = plans
    assert conversation.external_id == "conv-1"  # the SDK's id, on the span that is not kept
    (turn,) = conversation.turns
    assert [r.usage.output_tokens for r in turn.rounds] == [5, 5]  # the SDK's count, once
    assert [[c.external_id for c in r.calls] for r in turn.rounds] == [["toolu_1"], []]
    assert turn.rounds[0].calls[0].response == json.dumps(WEATHER)
    assert turn.assistant_content == "Sunny."
    assert conversation.tools and conversation.tools[0]["name"] == "get_weather"
    # The kept report's traces and the other's all belong to the turn.
    assert len(turn.traces) == (2 if nested else 4)


def test_the_same_response_id_in_two_services_or_at_two_times_is_two_calls():
    def call(trace, service, start):
        return make_span(
            trace,
            trace,
            "chat",
            start,
            start + 100 * MS,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.response.id": "chatcmpl-1",
                "gen_ai.usage.input_tokens": 3,
                "gen_ai.output.messages": json.dumps([text("assistant", "hi")]),
            },
            service=service,
        )

    spans = [call(1, "a", 0), call(2, "b", 0), call(3, "a", 10_000 * MS)]
    rounds = [r for c in _plans(spans) for t in c.turns for r in t.rounds]
    assert len(rounds) == 3
    records = [normalize_span(s) for s in spans]
    assert record_links(records[0]) & record_links(records[2])  # projected together
    assert not record_links(records[0]) & record_links(records[1])


def _vercel_run(trace: int, start: int, session: str | None, stream: bool) -> list:
    operation = "ai.streamText" if stream else "ai.generateText"
    step = f"{operation}.doStream" if stream else f"{operation}.doGenerate"
    meta = {"ai.telemetry.metadata.sessionId": session} if session else {}
    base = {"ai.telemetry.functionId": "weather", "ai.model.provider": "openai.chat", **meta}
    tool = (
        '{"type":"function","name":"get_weather","description":"d","inputSchema":{"type":"object"}}'
    )
    prompt = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
    ]
    call = {"type": "tool-call", "toolCallId": f"call_{trace}", "toolName": "get_weather"}
    result = {
        "type": "tool-result",
        "toolCallId": f"call_{trace}",
        "toolName": "get_weather",
        "output": {"type": "text", "value": '{"forecast":"sunny"}'},
    }
    calls = [{**call, "input": '{"city": "Paris"}' if not stream else {"city": "Paris"}}]
    return [
        make_span(
            trace,
            1,
            operation,
            start,
            start + 900 * MS,
            {
                **base,
                "ai.operationId": operation,
                "ai.prompt": json.dumps({"system": "Be brief.", "messages": prompt[1:]}),
                "ai.response.text": "Sunny.",
            },
        ),
        make_span(
            trace,
            2,
            step,
            start + 10 * MS,
            start + 300 * MS,
            {
                **base,
                "ai.operationId": step,
                "ai.prompt.messages": json.dumps(prompt),
                "ai.prompt.tools": [tool],
                "ai.response.toolCalls": json.dumps(calls),
                "ai.response.text": "",
                "ai.response.finishReason": "tool-calls",
                "gen_ai.system": "openai.chat",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": 61,
                "gen_ai.usage.output_tokens": 42,
            },
            parent=1,
        ),
        make_span(
            trace,
            3,
            "ai.toolCall",
            start + 310 * MS,
            start + 320 * MS,
            {
                **base,
                "ai.operationId": "ai.toolCall",
                "ai.toolCall.id": f"call_{trace}",
                "ai.toolCall.name": "get_weather",
                "ai.toolCall.args": '{"city":"Paris"}',
                "ai.toolCall.result": json.dumps('{"forecast":"sunny"}'),
            },
            parent=1,
        ),
        make_span(
            trace,
            4,
            step,
            start + 330 * MS,
            start + 800 * MS,
            {
                **base,
                "ai.operationId": step,
                "ai.prompt.messages": json.dumps(
                    [
                        *prompt,
                        {"role": "assistant", "content": [{**call, "input": {"city": "Paris"}}]},
                        {"role": "tool", "content": [result]},
                    ]
                ),
                "ai.response.text": "Sunny.",
                "ai.response.finishReason": "stop",
                "gen_ai.usage.input_tokens": 130,
                "gen_ai.usage.output_tokens": 17,
            },
            parent=1,
        ),
    ]


def test_vercel_ai_sdk_runs_are_turns_of_steps_with_their_tool_calls():
    for stream in (False, True):
        spans = _vercel_run(1, 0, "s-1", stream) + _vercel_run(2, 2000 * MS, "s-1", stream)
        (conversation,) = _plans(spans)
        assert conversation.external_id == "s-1"
        assert conversation.system_prompt == "Be brief."
        assert conversation.tools == [
            {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}
        ]
        assert conversation.metadata["otel.agent.name"] == "weather"
        for n, turn in enumerate(conversation.turns, 1):
            assert (turn.user_content, turn.assistant_content) == ("weather?", "Sunny.")
            assert turn.status == "completed"
            first, second = turn.rounds
            assert (first.usage.provider, first.usage.input_tokens) == ("openai", 61)
            (call,) = first.calls
            assert (call.external_id, call.function_name, call.arguments) == (
                f"call_{n}",
                "get_weather",
                {"city": "Paris"},
            )
            assert call.response == '{"forecast":"sunny"}'
            assert call.span_id is not None and call.started_ns is not None
            assert second.calls == []
    # Without a session id, each call is a conversation of its own.
    assert len(_plans(_vercel_run(1, 0, None, False) + _vercel_run(2, 9 * MS, None, False))) == 2


def _strands_chat(latest: bool) -> object:
    blocks = json.dumps([{"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {}}}])
    results = json.dumps(
        [{"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "sunny"}]}}]
    )
    if latest:
        parts = [
            {"type": "tool_call_response", "id": "t1", "response": [{"text": "sunny"}]},
        ]
        events = [
            {"gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Sys."}])},
            {
                "gen_ai.input.messages": json.dumps(
                    [
                        text("user", "weather?"),
                        calls_message([("t1", "get_weather", {})]),
                        {"role": "user", "parts": parts},
                    ]
                )
            },
            {"gen_ai.output.messages": json.dumps([text("assistant", "Sunny.")])},
        ]
        named = [("gen_ai.client.inference.operation.details", e) for e in events]
    else:
        named = [
            ("gen_ai.system.message", {"content": json.dumps([{"text": "Sys."}])}),
            ("gen_ai.user.message", {"content": json.dumps([{"text": "weather?"}])}),
            ("gen_ai.assistant.message", {"content": blocks}),
            ("gen_ai.tool.message", {"content": results}),
            (
                "gen_ai.choice",
                {"finish_reason": "end_turn", "message": json.dumps([{"text": "Sunny."}])},
            ),
        ]
    return make_span(
        1,
        2,
        "chat",
        0,
        100 * MS,
        {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 5},
        events=[
            {"name": name, "time_ns": i, "attributes": attrs}
            for i, (name, attrs) in enumerate(named)
        ],
    )


def test_span_events_are_read_as_log_records_and_not_kept_raw():
    for latest in (False, True):
        span = _strands_chat(latest)
        record = normalize_span(span)
        user, call, result = record["input"][-3:]
        assert (user["role"], user["parts"]) == ("user", [{"type": "text", "content": "weather?"}])
        assert call["parts"][0]["id"] == "t1" and call["parts"][0]["name"] == "get_weather"
        assert result["parts"][0]["id"] == "t1" and result["parts"][0]["response"] == "sunny"
        assert record["output"][0]["parts"] == [{"type": "text", "content": "Sunny."}]
        system = record.get("system") or record["input"][0]["parts"][0]["content"]
        assert system == "Sys."
        batch = prepare_spans(Decoded(spans=[span]), NO_RULES)
        stored = json.dumps(batch.spans[0].events)
        assert "sunny" not in stored and "weather?" not in stored


def test_bedrock_converse_blocks_are_parts():
    assert content_parts(json.dumps([{"text": "a"}, {"text": "b"}]), 10_000) == [
        {"type": "text", "content": "a"},
        {"type": "text", "content": "b"},
    ]
    (call,) = content_parts(
        [{"toolUse": {"toolUseId": "t", "name": "f", "input": {"x": 1}}}], 10_000
    )
    assert call == {"type": "tool_call", "id": "t", "name": "f", "arguments": {"x": 1}}
    (result,) = content_parts(
        [{"toolResult": {"toolUseId": "t", "content": [{"text": "r1"}, {"text": "r2"}]}}], 10_000
    )
    assert result == {"type": "tool_call_response", "id": "t", "response": "r1\n\nr2"}


def test_a_span_of_a_tool_never_offered_is_not_a_call():
    agent = {"gen_ai.operation.name": "invoke_agent"}
    chat = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.tool.definitions": TOOLS,
        "gen_ai.output.messages": json.dumps(
            [calls_message([("c1", "get_weather", {}), ("c2", "get_weather", {})])]
        ),
    }

    def tool(span, name, call_id, start):
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
        }
        return make_span(1, span, f"execute_tool {name}", start, start + MS, attributes, parent=1)

    final = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.output.messages": json.dumps([text("assistant", "done")]),
    }
    spans = [
        make_span(1, 1, "invoke_agent", 0, 100 * MS, agent),
        make_span(1, 2, "generate_content", MS, 10 * MS, chat, parent=1),
        tool(3, "get_weather", "c1", 11 * MS),
        tool(4, "get_weather", "c2", 12 * MS),
        tool(5, "(merged tools)", "event-uuid", 13 * MS),
        make_span(1, 6, "generate_content", 20 * MS, 30 * MS, final, parent=1),
    ]
    ((turn,),) = [c.turns for c in _plans(spans)]
    assert [[c.external_id for c in r.calls] for r in turn.rounds] == [["c1", "c2"], []]
