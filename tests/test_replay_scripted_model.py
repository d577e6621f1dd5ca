"""The scripted demo model's rules (webapp/replay/scripted_model.py), pure: it answers the
same request the same way, calls a tool again when the last result it sees failed, calls a tool
when it sees no result at all (tools offered), and answers from the last result otherwise; its
answers are Chat Completions the run's parser reads."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from webapp.replay import scripted_model
from webapp.replay.next_action import parse_answer

names = st.sampled_from(["lookup_order", "web_search", "get_weather"])
texts = st.text(max_size=40)
arguments = st.dictionaries(st.sampled_from(["id", "q", "n"]), st.integers() | texts, max_size=3)
TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {}}}]


def call_message(i, name, args):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


@st.composite
def histories(draw):
    """A user message, then rounds of one call each, each answered (or not) by a result."""
    messages = [{"role": "user", "content": draw(texts)}]
    for i in range(draw(st.integers(0, 4))):
        messages.append(call_message(i, draw(names), draw(arguments)))
        if draw(st.booleans()):
            messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": draw(texts)})
    return {"model": "m", "messages": messages, "tools": TOOLS}


@given(histories())
def test_the_answer_is_deterministic_and_a_chat_completion_the_parser_reads(body):
    answer = scripted_model.chat_completion(body, 7)
    assert answer == scripted_model.chat_completion(json.loads(json.dumps(body)), 7)
    assert scripted_model.is_scripted(answer)
    action = parse_answer("openai-chat", answer)
    call, text = scripted_model.decide(body)
    if call is not None:
        assert action.kind == "calls" and [c.name for c in action.calls] == [call["name"]]
        assert action.calls[0].arguments == call["arguments"]
    else:
        assert action.kind == "answer" and action.text == text


@given(histories(), names, arguments, texts)
def test_a_failed_last_result_is_called_again_and_a_good_one_answered(body, name, args, rest):
    body = {**body, "messages": [*body["messages"], call_message(99, name, args)]}
    failed = [
        *body["messages"],
        {"role": "tool", "tool_call_id": "c99", "content": "ERROR " + rest},
    ]
    assert scripted_model.decide({**body, "messages": failed}) == (
        {"name": name, "arguments": args},
        None,
    )
    good = [*body["messages"], {"role": "tool", "tool_call_id": "c99", "content": "ok " + rest}]
    call, text = scripted_model.decide({**body, "messages": good})
    assert call is None and text.startswith(scripted_model.ANSWER_PREFIX) and name in text


@given(histories())
def test_without_any_result_it_calls_a_tool(body):
    messages = [m for m in body["messages"] if m["role"] != "tool"]
    call, text = scripted_model.decide({**body, "messages": messages})
    assert text is None and call is not None
    called = [m["tool_calls"][0]["function"]["name"] for m in messages if m["role"] == "assistant"]
    assert call["name"] == (called[-1] if called else "lookup_order")
