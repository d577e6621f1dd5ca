"""Provider message lists → turns with rounds (pure)."""

from __future__ import annotations

import pytest

from webapp.ingest.importers import ImportFormatError, import_conversation


def calls_of(message):
    return [(c.id, c.name, c.round_index, c.sequence_index, c.response) for c in message.tool_calls]


def openai_call(call_id: str, name: str, arguments: str = "{}") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_openai_chat_rounds_parallel_calls_text_beside_calls_and_final_text():
    imported = import_conversation(
        "openai-chat",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    openai_call("a", "geo", '{"city": "Zurich"}'),
                    openai_call("b", "geo"),
                ],
            },
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "A"}]},
            {
                "role": "assistant",
                "content": "Let me check",
                "tool_calls": [openai_call("c", "weather")],
            },
            {"role": "tool", "tool_call_id": "c", "content": ""},
            {"role": "assistant", "content": "Sunny."},
            {"role": "user", "content": "Thanks"},
        ],
        id_prefix="imp-x",
    )
    assert imported.system_prompt == "Be brief."
    user, first, second, thanks = imported.messages
    assert (user.id, user.role, user.content) == ("imp-x-0", "user", "Weather?")
    # "Let me check" was sent to the model: it closes the turn collecting rounds, and the call
    # made next to it starts the next one.
    assert (first.id, first.role, first.content) == ("imp-x-1", "assistant", "Let me check")
    assert calls_of(first) == [("a", "geo", 0, 0, "A"), ("b", "geo", 0, 1, "B")]
    assert first.tool_calls[0].arguments == {"city": "Zurich"}
    assert first.tool_calls[1].arguments == {}
    assert (second.id, second.content) == ("imp-x-2", "Sunny.")
    assert calls_of(second) == [("c", "weather", 0, 0, "")]
    assert (thanks.id, thanks.content) == ("imp-x-3", "Thanks")


def test_a_second_turn_without_a_final_text_starts_after_the_user_message():
    imported = import_conversation(
        "openai-chat",
        messages=[
            {"role": "user", "content": "one"},
            {"role": "assistant", "tool_calls": [openai_call("a", "f")]},
            {"role": "user", "content": "two"},
            {"role": "assistant", "tool_calls": [openai_call("b", "f")]},
            {"role": "tool", "tool_call_id": "a", "content": "late A"},
        ],
        id_prefix="p",
    )
    roles = [(m.role, m.content, len(m.tool_calls)) for m in imported.messages]
    assert roles == [
        ("user", "one", 0),
        ("assistant", None, 1),
        ("user", "two", 0),
        ("assistant", None, 1),
    ]
    assert imported.messages[1].tool_calls[0].response == "late A"  # attached by id
    assert imported.messages[3].tool_calls[0].response is None


def test_arguments_that_are_not_a_json_object_are_kept_raw():
    imported = import_conversation(
        "openai-chat",
        messages=[
            {
                "role": "assistant",
                "tool_calls": [
                    openai_call("a", "f", '{"trunc'),
                    openai_call("b", "f", "[1, 2]"),
                    openai_call("c", "f", ""),
                ],
            }
        ],
        id_prefix="p",
    )
    args = [c.arguments for c in imported.messages[0].tool_calls]
    assert args == [{"_raw": '{"trunc'}, {"_raw": "[1, 2]"}, None]


def test_openai_responses_items():
    imported = import_conversation(
        "openai-responses",
        messages=[
            {"role": "user", "content": "Find flights"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"a":1}'},
            {"type": "reasoning", "id": "rs_2", "summary": []},
            {"type": "function_call", "call_id": "c2", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "r1"},
            {"type": "function_call_output", "call_id": "c2", "output": "r2"},
            {"type": "function_call", "call_id": "c3", "name": "book", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c3", "output": "ok"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Booked."}],
            },
        ],
        system="Travel agent",
        id_prefix="p",
    )
    assert imported.system_prompt == "Travel agent"
    user, assistant = imported.messages
    assert (user.role, user.content) == ("user", "Find flights")
    assert calls_of(assistant) == [
        ("c1", "search", 0, 0, "r1"),
        ("c2", "search", 0, 1, "r2"),
        ("c3", "book", 1, 0, "ok"),
    ]
    assert assistant.content == "Booked."


def test_openai_responses_input_may_be_a_string():
    imported = import_conversation("openai-responses", messages="hello", id_prefix="p")
    assert [(m.role, m.content) for m in imported.messages] == [("user", "hello")]


def test_anthropic_tool_use_and_tool_result_blocks():
    imported = import_conversation(
        "anthropic",
        system=[{"type": "text", "text": "You onboard vendors."}],
        messages=[
            {"role": "user", "content": "Onboard TechCorp"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "tc_01",
                        "name": "vendor_lookup",
                        "input": {"name": "TechCorp"},
                    },
                    {"type": "tool_use", "id": "tc_02", "name": "credit_check", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "tc_01",
                        "content": [{"type": "text", "text": "not found"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "tc_02",
                        "content": "boom",
                        "is_error": True,
                    },
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "Creating it now."}]},
            {"role": "user", "content": [{"type": "text", "text": "Great"}]},
        ],
        id_prefix="p",
    )
    assert imported.system_prompt == "You onboard vendors."
    user, checking, assistant, great = imported.messages
    assert user.content == "Onboard TechCorp"
    assert (checking.role, checking.content, checking.tool_calls) == ("assistant", "Checking.", [])
    assert calls_of(assistant) == [
        ("tc_01", "vendor_lookup", 0, 0, "not found"),
        ("tc_02", "credit_check", 0, 1, "boom"),
    ]
    assert assistant.tool_calls[1].is_error is True
    assert assistant.tool_calls[0].arguments == {"name": "TechCorp"}
    assert assistant.content == "Creating it now."
    assert great.content == "Great"


def test_anthropic_results_and_the_next_question_in_one_user_message():
    imported = import_conversation(
        "anthropic",
        messages=[
            {"role": "user", "content": "q1"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t"},  # no content: an empty result
                    {"type": "text", "text": "q2"},
                ],
            },
        ],
        id_prefix="p",
    )
    assert [(m.role, m.content) for m in imported.messages] == [
        ("user", "q1"),
        ("assistant", None),
        ("user", "q2"),
    ]
    assert imported.messages[1].tool_calls[0].response == ""


def test_anthropic_text_next_to_tool_use_closes_the_open_turn_and_the_calls_start_the_next():
    """A replay export merges one run's answer with the next run's tool_use into one assistant
    message (Anthropic wants alternating roles); both are kept, as the two runs they were."""
    imported = import_conversation(
        "anthropic",
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "f"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Found it [source1]."},
                    {"type": "tool_use", "id": "c2", "name": "g", "input": {}},
                ],
            },
        ],
        id_prefix="p",
    )
    _user, first, second = imported.messages
    assert (first.content, calls_of(first)) == ("Found it [source1].", [("c1", "f", 0, 0, "")])
    assert (second.content, calls_of(second)) == (None, [("c2", "g", 0, 0, None)])


def test_anthropic_text_blocks_are_one_message_each_and_the_first_takes_the_given_id():
    imported = import_conversation(
        "anthropic",
        messages=[
            {
                "role": "user",
                "id": "mine",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
            },
        ],
        id_prefix="p",
    )
    assert [(m.id, m.role, m.content) for m in imported.messages] == [
        ("mine", "user", "a"),
        ("p-1", "user", "b"),
        ("p-2", "assistant", "x"),
        ("p-3", "assistant", "y"),
    ]


def test_openai_responses_instructions_are_the_system_prompt_and_system_items_stay_items():
    imported = import_conversation(
        "openai-responses",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        id_prefix="p",
    )
    assert imported.system_prompt is None
    assert [(m.role, m.content) for m in imported.messages] == [
        ("system", "Be brief."),
        ("user", "hi"),
    ]
    chat = import_conversation(
        "openai-chat",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        id_prefix="p",
    )
    assert chat.system_prompt == "Be brief." and len(chat.messages) == 1


def test_the_schema_sent_for_a_tool_without_one_reads_back_as_none():
    """Responses and Anthropic always send a schema; the empty one stands for "none"."""
    empty = {"type": "object", "properties": {}}
    for fmt, tool in (
        ("openai-responses", {"type": "function", "name": "f", "parameters": empty}),
        ("anthropic", {"name": "f", "input_schema": empty}),
    ):
        (read,) = import_conversation(fmt, messages=[], tools=[tool], id_prefix="p").tools
        assert read["parameters"] is None, fmt
    chat_tool = {"type": "function", "function": {"name": "f", "parameters": empty}}
    (read,) = import_conversation(
        "openai-chat", messages=[], tools=[chat_tool], id_prefix="p"
    ).tools
    assert read["parameters"] == empty


def test_tools_in_every_provider_shape():
    imported = import_conversation(
        "openai-chat",
        messages=[],
        tools=[
            {
                "type": "function",
                "function": {"name": "a", "description": "A", "parameters": {"type": "object"}},
            },
            {"type": "function", "name": "b", "parameters": {"type": "object"}},
            {"name": "c", "description": "C", "input_schema": {"type": "object"}},
            {"type": "web_search_preview"},
        ],
        id_prefix="p",
    )
    assert imported.tools == [
        {"name": "a", "description": "A", "parameters": {"type": "object"}},
        {"name": "b", "description": None, "parameters": {"type": "object"}},
        {"name": "c", "description": "C", "parameters": {"type": "object"}},
    ]


def test_given_message_ids_are_kept_and_others_are_generated_by_position():
    imported = import_conversation(
        "openai-chat",
        messages=[
            {"role": "user", "content": "a", "id": "mine"},
            {"role": "assistant", "content": "b"},
        ],
        id_prefix="p",
    )
    assert [m.id for m in imported.messages] == ["mine", "p-1"]


@pytest.mark.parametrize(
    ("fmt", "messages", "field"),
    [
        ("openai-chat", [{"role": "tool", "tool_call_id": "x", "content": "r"}], "messages.0"),
        ("openai-chat", [{"role": "robot"}], "messages.0.role"),
        ("openai-chat", "not a list", "messages"),
        ("openai-chat", None, "messages"),
        (
            "openai-chat",
            [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": ""}}]}],
            "messages.0.tool_calls.0.function.name",
        ),
        (
            "openai-chat",
            [{"role": "assistant", "tool_calls": [openai_call("a", "f"), openai_call("a", "g")]}],
            "messages.0.tool_calls.1",
        ),
        (
            "openai-chat",
            [
                {"role": "assistant", "tool_calls": [openai_call("a", "f")]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "a", "content": "2"},
            ],
            "messages.2",
        ),
        (
            "anthropic",
            [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}],
                }
            ],
            "messages.0.content.0.input",
        ),
        ("anthropic", [{"role": "system", "content": "x"}], "messages.0.role"),
        (
            "openai-responses",
            [{"type": "function_call_output", "call_id": "zz", "output": "r"}],
            "input.0",
        ),
        (
            "openai-chat",
            [{"role": "assistant", "tool_calls": [openai_call("x" * 256, "f")]}],
            "messages.0.tool_calls.0.id",
        ),
    ],
)
def test_unreadable_lists_name_the_offending_item(fmt, messages, field):
    with pytest.raises(ImportFormatError) as excinfo:
        import_conversation(fmt, messages=messages, id_prefix="p")
    assert excinfo.value.field == field
