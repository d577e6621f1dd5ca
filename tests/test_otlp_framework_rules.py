"""The pure rules issue 21 added for agent frameworks. The real producers run in
tests/test_otlp_frameworks_python.py; these pin each rule, and that order never matters:
docs/otlp-mapping.md, 'Tool spans without a call id'
docs/otlp-mapping.md, 'Payloads of framework tool spans'
docs/otlp-mapping.md, 'Content blocks'
docs/otlp-mapping.md, 'Events in an attribute'
docs/otlp-mapping.md, 'The outermost agent span keys the turn'
docs/otlp-mapping.md, 'Where messages are read'
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.ingest.otlp.event_lists import event_messages
from webapp.ingest.otlp.log_order import log_order
from webapp.ingest.otlp.payloads import callback_arguments, joined_text, tool_result
from webapp.ingest.otlp.tool_spans import agreement, match
from webapp.ingest.otlp.turn_keys import is_graph_step, turn_agent

LIMIT = 1 << 20


def _tool(span_id: str, name: str, start: int, arguments=None) -> dict:
    return {
        "span_id": span_id,
        "start_ns": start,
        "tool": {"id": "", "name": name, "arguments": arguments},
    }


def _call(name: str, arguments: dict) -> dict:
    return {"type": "tool_call", "id": "call_1", "name": name, "arguments": arguments}


# --- Tool spans without a call id --------------------------------------------------------------


def test_a_tool_span_is_matched_by_name_inside_the_round_window():
    pool = [
        _tool("early", "get_weather", 5),  # before the model call ended
        _tool("other", "get_time", 12),
        _tool("late", "get_weather", 30),  # after the next round started
        _tool("inside", "get_weather", 15),
    ]
    found = match(_call("get_weather", {"city": "Paris"}), pool, set(), (10, 20))
    assert found["span_id"] == "inside"
    assert match(_call("get_weather", {"city": "Paris"}), pool, {"inside"}, (10, 20)) is None
    # The last round's window has no end.
    assert match(_call("get_weather", {}), pool, {"inside"}, (10, None))["span_id"] == "late"


def test_arguments_that_disagree_rule_a_span_out_and_agreeing_ones_win():
    paris, lyon = {"city": "Paris"}, {"city": "Lyon"}
    pool = [_tool("a", "get_weather", 11, lyon), _tool("b", "get_weather", 12, paris)]
    assert match(_call("get_weather", paris), pool, set(), (10, None))["span_id"] == "b"
    assert match(_call("get_weather", lyon), pool, set(), (10, None))["span_id"] == "a"
    assert match(_call("get_weather", {"city": "Rome"}), pool, set(), (10, None)) is None
    # OpenInference LangChain's plain-text input: the value of a one-argument call.
    assert agreement(paris, {"_raw": "Paris"}) == 1
    assert agreement(paris, {"_raw": "something else"}) == 0
    assert agreement(paris, None) == 0
    raw = [_tool("x", "get_weather", 11, {"_raw": "Lyon"}), _tool("y", "get_weather", 12, None)]
    assert match(_call("get_weather", lyon), raw, set(), (10, None))["span_id"] == "x"


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(6)))
def test_matching_does_not_depend_on_the_order_spans_are_given(order):
    cities = ["Paris", "Lyon", "Rome"]
    pool = [
        _tool(f"s{i}", "get_weather", 10 + i, {"city": cities[i % 3]} if i < 3 else None)
        for i in range(6)
    ]
    shuffled = [pool[i] for i in order]
    for city in cities:
        expected = match(_call("get_weather", {"city": city}), pool, set(), (0, None))
        got = match(_call("get_weather", {"city": city}), shuffled, set(), (0, None))
        assert got is expected


# --- Payloads of framework tool spans, content blocks ----------------------------------------


def test_langchain_callback_payloads_give_arguments_ids_and_results():
    arguments = json.dumps(
        {
            "input_str": "{'city': 'Paris'}",
            "tags": ["seq:step:1"],
            "metadata": {"thread_id": "t"},
            "inputs": {"city": "Paris"},
            "kwargs": {"color": "green", "name": None, "tool_call_id": "call_time_1"},
        }
    )
    assert callback_arguments(arguments, LIMIT) == ({"city": "Paris"}, "call_time_1")
    openllmetry = json.dumps(
        {
            "output": {
                "lc": 1,
                "type": "constructor",
                "id": ["langchain", "schema", "messages", "ToolMessage"],
                "kwargs": {"content": '{"time": "14:05"}', "tool_call_id": "call_time_1"},
            },
            "kwargs": {"name": "get_time"},
        }
    )
    assert tool_result(openllmetry, LIMIT) == ('{"time": "14:05"}', "call_time_1")
    openinference = json.dumps(
        {"type": "tool", "data": {"content": "sunny", "tool_call_id": "call_weather_1"}}
    )
    assert tool_result(openinference, LIMIT) == ("sunny", "call_weather_1")
    # Anything else is left as it is.
    assert callback_arguments('{"city": "Paris"}', LIMIT) == ('{"city": "Paris"}', None)
    assert tool_result('{"output": 3, "more": 1}', LIMIT) == ('{"output": 3, "more": 1}', None)
    assert tool_result("plain", LIMIT) == ("plain", None)


def test_text_blocks_become_their_joined_text():
    assert joined_text([{"type": "text", "text": "a"}, {"text": "b"}]) == "a\n\nb"
    assert tool_result('[{"type": "text", "text": "sunny"}]', LIMIT) == ("sunny", None)
    image = [{"type": "text", "text": "a"}, {"type": "image", "source": {}}]
    assert joined_text(image) is image
    assert joined_text([]) == []


# --- Events in an attribute (Logfire) ----------------------------------------------------------


def test_an_events_attribute_splits_into_input_and_output():
    events = [
        {"event.name": "gen_ai.system.message", "content": "Be brief.", "role": "system"},
        {"event.name": "gen_ai.user.message", "content": "Weather?", "role": "user"},
        {
            "event.name": "gen_ai.assistant.message",
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {
            "event.name": "gen_ai.assistant.message",
            "role": "assistant",
            "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
    ]
    inputs, outputs = event_messages(json.dumps(events), LIMIT)
    assert [m["role"] for m in inputs] == ["system", "user"]
    (output,) = outputs
    assert [p["id"] for p in output["parts"]] == ["c1", "c2"]
    # With the results and the answer: the history's split assistant items are one message.
    results = [
        {"event.name": "gen_ai.tool.message", "role": "tool", "id": "c1", "content": "sunny"},
        {"event.name": "gen_ai.tool.message", "role": "tool", "id": "c2", "content": "14:05"},
        {"event.name": "gen_ai.assistant.message", "role": "assistant", "content": "Sunny."},
    ]
    inputs, outputs = event_messages(events + results, LIMIT)
    assert [m["role"] for m in inputs] == ["system", "user", "assistant", "tool", "tool"]
    assert [p["id"] for p in inputs[2]["parts"]] == ["c1", "c2"]
    assert outputs[0]["parts"] == [{"type": "text", "content": "Sunny."}]
    assert event_messages([{"event.name": "something.else"}], LIMIT) is None
    assert event_messages("not json", LIMIT) is None


# --- The outermost agent span keys the turn ---------------------------------------------------


def test_the_outermost_agent_that_is_not_a_graph_step_keys_the_turn():
    node = {"class": "agent", "graph_step": True, "span_id": "node"}
    inner = {"class": "agent", "span_id": "inner"}
    chain = {"class": "other", "span_id": "chain"}
    outer = {"class": "agent", "span_id": "outer"}
    assert turn_agent([inner, chain, outer])["span_id"] == "outer"
    assert turn_agent([node, chain]) is None
    assert turn_agent([node, inner])["span_id"] == "inner"
    assert is_graph_step({"metadata": json.dumps({"langgraph_node": "agent"})})
    assert is_graph_step({"metadata": {"langgraph_node": "agent"}})
    assert not is_graph_step({"metadata": json.dumps({"thread_id": "t"})})
    assert not is_graph_step({"metadata": "langgraph_node, not JSON"})


# --- Log records that tie on time and position -------------------------------------------------


def _log(role: str, text: str, ordinal: int = 0) -> dict:
    return {
        "event": f"gen_ai.{role}.message",
        "time_ns": 1000,
        "ordinal": ordinal,
        "message": {"role": role, "parts": [{"type": "text", "content": text}]},
    }


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(3)))
def test_records_that_tie_put_the_system_prompt_first_whatever_their_arrival(order):
    records = [_log("user", "Weather?"), _log("system", "Be brief."), _log("assistant", "Hm")]
    arrived = sorted([records[i] for i in order], key=log_order)
    assert [r["message"]["role"] for r in arrived] == ["system", "user", "assistant"]


def test_positions_still_order_records_of_one_request():
    records = [_log("user", "first", 0), _log("assistant", "reply", 1), _log("user", "again", 2)]
    arrived = sorted(reversed(records), key=log_order)
    assert [r["message"]["parts"][0]["content"] for r in arrived] == ["first", "reply", "again"]


# --- Text before tool_use ----------------------------------------------------------------------


def test_the_text_a_model_sends_before_its_tool_calls_is_replayed_before_them(client, project_key):
    """docs/otlp-mapping.md, 'User and assistant messages': Claude's "Let me check." before its
    tool_use is the round's text, and every replay format sends it with the round's calls."""
    from otlp_support import T0, make_span, traces_json

    said = {"type": "text", "content": "Let me check."}
    call = {"type": "tool_call", "id": "toolu_1", "name": "get_weather", "arguments": {"c": 1}}
    asked = [{"role": "user", "parts": [{"type": "text", "content": "Weather?"}]}]
    first = [{"role": "assistant", "parts": [said, call], "finish_reason": "tool_use"}]
    result = {"type": "tool_call_response", "id": "toolu_1", "response": "sunny"}
    history = [*asked, *first, {"role": "user", "parts": [result]}]
    answer = [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}]

    def chat(span: int, start: int, inputs, outputs):
        return make_span(
            1,
            span,
            "chat claude",
            start,
            start + 10,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(inputs),
                "gen_ai.output.messages": json.dumps(outputs),
            },
        )

    body = traces_json([chat(1, T0, asked, first), chat(2, T0 + 20, history, answer)])
    headers = {**project_key.headers, "Content-Type": "application/json"}
    assert client.post("/v1/traces", data=body, headers=headers).status_code == 200
    (conversation,) = client.get("/api/v1/conversations", headers=project_key.headers).get_json()[
        "data"
    ]
    replays = {
        fmt: client.get(
            f"/api/v1/conversations/{conversation['id']}/replay?format={fmt}&freshness=off",
            headers=project_key.headers,
        ).get_json()
        for fmt in ("openai-chat", "openai-responses", "anthropic")
    }
    assert all(r["validation"] == [] for r in replays.values())
    chat_messages = replays["openai-chat"]["payload"]["messages"]
    assert (chat_messages[1]["content"], chat_messages[1]["tool_calls"][0]["id"]) == (
        "Let me check.",
        "toolu_1",
    )
    items = replays["openai-responses"]["payload"]["input"]
    assert items[1] == {"role": "assistant", "content": "Let me check."}
    assert items[2]["type"] == "function_call"
    blocks = replays["anthropic"]["payload"]["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[0]["text"] == "Let me check."
