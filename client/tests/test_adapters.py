"""OpenAI chat-completion rounds as Toolscope calls and usage, from plain dicts (the SDK objects
are covered in Toolscope's own suite, with the real openai package)."""

from __future__ import annotations

from toolscope_client import calls_from_openai, tool_definition, usage_from_openai

MESSAGE = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Zurich"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "get_weather", "arguments": "{not json"}},
        {"id": "call_c", "type": "function", "function": {"name": "now", "arguments": ""}},
        {"id": "call_d", "type": "function", "function": {"name": "echo", "arguments": "[1]"}},
    ],
}


def test_calls_keep_their_order_and_parse_their_arguments():
    calls = calls_from_openai(MESSAGE)

    assert [(c["id"], c["sequence_index"]) for c in calls] == [
        ("call_a", 0), ("call_b", 1), ("call_c", 2), ("call_d", 3)
    ]
    assert [c["arguments"] for c in calls] == [
        {"city": "Zurich"}, {"_raw": "{not json"}, None, {"_raw": [1]}
    ]
    assert all("response" not in c and "round_index" not in c for c in calls)


def test_results_from_tool_messages_or_a_mapping_with_errors_and_times():
    tool_messages = [
        {"role": "tool", "tool_call_id": "call_a", "content": "18 °C"},
        {"role": "tool", "tool_call_id": "call_b", "content": {"content": {"ok": False}}},
    ]

    from_messages = calls_from_openai(
        MESSAGE,
        tool_messages,
        started_at={"call_a": "2026-03-10T09:30:00Z"},
        ended_at={"call_a": "2026-03-10T09:30:01Z"},
        errors=["call_b"],
    )
    from_mapping = calls_from_openai(MESSAGE, {"call_c": {"now": 1}})

    assert from_messages[0]["response"] == {"content": "18 °C", "is_error": False}
    assert from_messages[0]["started_at"] == "2026-03-10T09:30:00Z"
    assert from_messages[0]["ended_at"] == "2026-03-10T09:30:01Z"
    assert from_messages[1]["response"] == {"content": '{"ok": false}', "is_error": True}
    assert "response" not in from_messages[2]
    assert from_mapping[2]["response"] == {"content": '{"now": 1}', "is_error": False}


def test_a_message_without_tool_calls_gives_none():
    assert calls_from_openai({"role": "assistant", "content": "hi"}) == []


def test_usage_from_a_completion():
    completion = {
        "model": "gpt-4o-2024-08-06",
        "usage": {
            "prompt_tokens": 210,
            "completion_tokens": 40,
            "prompt_tokens_details": {"cached_tokens": 128},
        },
    }

    assert usage_from_openai(completion) == {
        "model": "gpt-4o-2024-08-06",
        "provider": "openai",
        "input_tokens": 210,
        "output_tokens": 40,
        "cached_tokens": 128,
    }
    assert usage_from_openai({"model": "x"}) is None


def test_tool_definitions_from_every_shape():
    native = {"name": "search", "description": "Find", "parameters": {"type": "object"}}
    openai = {"type": "function", "function": native}
    anthropic = {"name": "search", "description": "Find", "input_schema": {"type": "object"}}

    assert tool_definition(native) == tool_definition(openai) == tool_definition(anthropic)
    assert tool_definition(native) == native
    assert tool_definition({"name": "bare"}) == {"name": "bare"}
