"""Normalization of spans and GenAI log records: classification, every source in its
precedence order (docs/otlp-mapping.md, 'Where messages are read'), and the quirks real
producers show."""

from __future__ import annotations

import json

import pytest

from tests.otlp_support import make_log, make_span
from webapp.ingest.otlp import messages as m
from webapp.ingest.otlp.genai_logs import normalize_log
from webapp.ingest.otlp.normalize import classify, normalize_span, raw_attributes


def _norm(attributes: dict, **kw) -> dict:
    return normalize_span(make_span(1, 2, kw.pop("name", "span"), 10, 20, attributes, **kw))


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"gen_ai.operation.name": "execute_tool"}, "tool"),
        ({"openinference.span.kind": "TOOL"}, "tool"),
        ({"traceloop.span.kind": "tool"}, "tool"),
        ({"gen_ai.operation.name": "invoke_agent"}, "agent"),
        ({"gen_ai.operation.name": "invoke_workflow"}, "agent"),
        ({"openinference.span.kind": "AGENT"}, "agent"),
        ({"gen_ai.operation.name": "chat"}, "llm"),
        ({"gen_ai.operation.name": "generate_content"}, "llm"),
        ({"openinference.span.kind": "LLM"}, "llm"),
        ({"llm.request.type": "chat"}, "llm"),
        ({"gen_ai.operation.name": "embeddings"}, "other"),
        ({"gen_ai.operation.name": "create_agent"}, "other"),
        ({"openinference.span.kind": "CHAIN"}, "other"),
        ({"http.method": "GET"}, "other"),
    ],
)
def test_classification(attributes, expected):
    assert classify(attributes) == expected


def test_semconv_json_string_and_structured_content_read_alike():
    # Quirk 1: a JSON string on spans, structured AnyValue on log records.
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": 1}}],
        },
    ]
    assert m.semconv_messages(json.dumps(messages)) == m.semconv_messages(messages)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"a": 1}, {"a": 1}),  # quirk 2: an object...
        ('{"a": 1}', {"a": 1}),  # ...or a JSON string
        ("[1, 2]", {"_raw": "[1, 2]"}),
        ("not json", {"_raw": "not json"}),
        (None, None),
    ],
)
def test_arguments(raw, expected):
    assert m.arguments_of(raw) == expected


@pytest.mark.parametrize("key", ["response", "result"])
def test_tool_results_under_response_or_result_are_kept_verbatim(key):
    # Quirk 3; a string result is never re-serialized, a structured one is compact JSON.
    text = m.semconv_part({"type": "tool_call_response", "id": "c", key: '{"a":  1}'}, 100)
    data = m.semconv_part({"type": "tool_call_response", "id": "c", key: {"a": 1}}, 100)
    assert text["response"] == '{"a":  1}'
    assert data["response"] == '{"a":1}'


def test_a_user_message_of_tool_results_is_not_a_user_prompt():
    # Quirk 4 (pydantic-ai v5).
    results = {
        "role": "user",
        "parts": [{"type": "tool_call_response", "id": "c", "response": "x"}],
    }
    prompt = {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    messages = m.semconv_messages([prompt, results])
    assert not m.is_user_prompt(messages[1])
    assert m.last_user_index(messages) == 0
    assert m.tail(messages) == [messages[1]]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["tool_calls"], ["tool_calls"]),
        ('["tool_calls"]', ["tool_calls"]),  # quirk 7: JSON-encoded (Agent Framework)
        ("tool_call", ["tool_call"]),
    ],
)
def test_finish_reasons(value, expected):
    record = _norm({"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": value})
    assert record["finish_reasons"] == expected


def test_usage_is_read_from_llm_spans_only():
    # Quirk 9: agent spans carry the run's totals.
    usage = {"gen_ai.usage.input_tokens": 5, "gen_ai.usage.output_tokens": 6}
    llm = _norm({"gen_ai.operation.name": "chat", **usage})
    agent = _norm({"gen_ai.operation.name": "invoke_agent", **usage})
    assert (llm["input_tokens"], llm["output_tokens"]) == (5, 6)
    assert "input_tokens" not in agent


def test_legacy_usage_keys_and_openinference_tokens():
    legacy = _norm(
        {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.usage.prompt_tokens": 3,
            "gen_ai.usage.completion_tokens": 4,
            "gen_ai.completion.0.finish_reason": "tool_calls",
        }
    )
    assert (legacy["provider"], legacy["input_tokens"], legacy["output_tokens"]) == ("openai", 3, 4)
    assert legacy["finish_reasons"] == ["tool_calls"]
    openinference = _norm(
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.system": "openai",
            "llm.token_count.prompt": 7,
            "llm.token_count.completion": 8,
            "llm.token_count.prompt_details.cache_read": 2,
            "llm.token_count.total": 15,
        }
    )
    assert openinference["model"] == "gpt-4o-mini"
    assert (openinference["input_tokens"], openinference["cached_tokens"]) == (7, 2)


def test_flattened_openllmetry_messages_are_ordered_by_number():
    attributes = {"llm.request.type": "chat"}
    for i in range(12):
        attributes[f"gen_ai.prompt.{i}.role"] = "user"
        attributes[f"gen_ai.prompt.{i}.content"] = f"m{i}"
    attributes.update(
        {
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "c1",
            "gen_ai.completion.0.tool_calls.0.name": "f",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"x": 1}',
            "gen_ai.completion.0.tool_calls.1.id": "c2",
            "gen_ai.completion.0.tool_calls.1.name": "g",
            "gen_ai.completion.0.tool_calls.1.arguments": "{}",
        }
    )
    record = _norm(attributes)
    assert [m.text_of(x) for x in record["input"]] == [f"m{i}" for i in range(12)]
    assert record["output"][0]["parts"] == [
        {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"x": 1}},
        {"type": "tool_call", "id": "c2", "name": "g", "arguments": {}},
    ]


def test_openinference_flattened_messages_and_tools():
    record = _norm(
        {
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "hi",
            "llm.input_messages.1.message.role": "assistant",
            "llm.input_messages.1.message.tool_calls.0.tool_call.id": "c1",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.name": "f",
            "llm.input_messages.1.message.tool_calls.0.tool_call.function.arguments": '{"a":1}',
            "llm.input_messages.2.message.role": "tool",
            "llm.input_messages.2.message.tool_call_id": "c1",
            "llm.input_messages.2.message.content": "42",
            "llm.tools.0.tool.json_schema": json.dumps(
                {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
            ),
        }
    )
    assert record["input"][1]["parts"] == [
        {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": 1}}
    ]
    assert record["input"][2]["parts"] == [
        {"type": "tool_call_response", "id": "c1", "response": "42"}
    ]
    assert record["tools"] == [{"name": "f", "description": None, "parameters": {"type": "object"}}]


def test_system_instructions_as_parts_json_or_text():
    # Quirk 6 (Agent Framework sends the system prompt apart from the messages).
    parts = [{"type": "text", "content": "be brief"}]
    assert m.system_instructions(parts) == "be brief"
    assert m.system_instructions(json.dumps(parts)) == "be brief"
    assert m.system_instructions("be brief") == "be brief"


def test_openinference_tool_span_and_error_text_from_the_exception_event():
    record = normalize_span(
        make_span(
            1,
            2,
            "get_weather",
            10,
            20,
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "get_weather",
                "tool.id": "c9",
                "input.value": '{"city": "Paris"}',
            },
            status=2,
            events=[
                {"name": "exception", "time_ns": 15, "attributes": {"exception.message": "down"}}
            ],
        )
    )
    assert record["tool"] == {
        "id": "c9",
        "name": "get_weather",
        "arguments": {"city": "Paris"},
        "result": None,
        "error": True,
        "error_text": "down",
    }


def test_execute_tool_span_name_gives_the_tool_name():
    record = _norm({"gen_ai.operation.name": "execute_tool"}, name="execute_tool lookup")
    assert record["tool"]["name"] == "lookup"


def test_conversation_ids_are_collected_by_key():
    record = _norm({"gen_ai.operation.name": "chat", "session.id": "s1", "other": "x"})
    assert record["conversation_ids"] == {"session.id": "s1"}


def test_openinference_request_body_is_the_fallback_source():
    body = {"messages": [{"role": "user", "content": "hi"}]}
    response = {
        "choices": [{"message": {"role": "assistant", "content": "yo"}, "finish_reason": "stop"}]
    }
    record = _norm(
        {
            "openinference.span.kind": "LLM",
            "input.value": json.dumps(body),
            "output.value": json.dumps(response),
        }
    )
    assert m.text_of(record["input_fallback"][0]) == "hi"
    assert record["output_fallback"][0]["finish_reason"] == "stop"


def test_content_keys_are_not_stored_raw_unless_unreadable():
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": "[]",
        "gen_ai.output.messages": "{not json secret@example.com",
        "gen_ai.prompt.0.content": "x",
        "llm.input_messages.0.message.content": "x",
        "input.value": "x",
    }
    raw = raw_attributes(attributes, lambda text: text.replace("secret@example.com", "[M]"))
    assert raw == {"gen_ai.operation.name": "chat", "gen_ai.output.messages": "{not json [M]"}


def test_legacy_events_node_and_agent_framework_shapes():
    # Quirk 11: the name from the attribute is handled by the reader; here the bodies.
    tool = normalize_log(make_log(1, 2, "gen_ai.tool.message", 5, {"id": "c1", "content": "42"}), 0)
    assert tool["message"]["parts"] == [
        {"type": "tool_call_response", "id": "c1", "response": "42"}
    ]
    assistant = normalize_log(
        make_log(
            1,
            2,
            "gen_ai.assistant.message",
            5,
            {
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]
            },
        ),
        1,
    )
    assert assistant["message"] == {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "f", "arguments": {}}],
    }
    choice = normalize_log(
        make_log(
            1,
            2,
            "gen_ai.choice",
            5,
            {"index": 1, "finish_reason": "stop", "message": {"content": "ok"}},
        ),
        2,
    )
    assert (choice["choice_index"], choice["message"]["finish_reason"]) == (1, "stop")
    details = normalize_log(
        make_log(
            1,
            2,
            "gen_ai.client.inference.operation.details",
            5,
            None,
            {
                "gen_ai.input.messages": [
                    {"role": "user", "parts": [{"type": "text", "content": "q"}]}
                ]
            },
        ),
        3,
    )
    assert m.text_of(details["input"][0]) == "q"


def test_anthropic_blocks_inside_a_content_string_are_read():
    content = json.dumps(
        [
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
        ]
    )
    message = m.chat_message("assistant", {"content": content}, 10_000)
    assert [p["type"] for p in message["parts"]] == ["text", "tool_call"]
    assert message["parts"][1]["arguments"] == {"a": 1}


def test_content_over_the_parse_limit_stays_opaque():
    big = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "x" * 100}]}])
    assert m.semconv_messages(big, limit=10) is None


def test_text_parts_without_content_are_structure_only():
    # pydantic-ai with include_content=False keeps roles and part types, drops the text.
    messages = m.semconv_messages([{"role": "user", "parts": [{"type": "text"}]}])
    assert messages[0]["parts"] == [{"type": "other", "kind": "text"}]
    assert m.text_of(messages[0]) is None
