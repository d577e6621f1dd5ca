"""The validators catch each kind of breakage a provider rejects; the naive lint uses them."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapp.replay import (
    History,
    ReplayOptions,
    naive_payload,
    naive_replay_problems,
    replay,
    validate,
)
from webapp.replay.validate import Memo

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import assistant, call, histories, history, options, user
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import assistant, call, histories, history, options, user

FORMATS = ("openai-chat", "openai-responses", "anthropic")


def codes(payload: Any, fmt: str) -> list[str]:
    problems = validate(payload, fmt)
    # A memo that has seen the payload (its arguments and names) changes nothing: every
    # payload of this file is checked both ways.
    memo = Memo()
    assert validate(payload, fmt, memo) == problems
    assert validate(payload, fmt, memo) == problems
    return [p.code for p in problems]


def tc(call_id: str, arguments: Any = "{}", name: str = "search") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"messages": list(messages)}


USER = {"role": "user", "content": "hi"}


def calls(*items: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(items)}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# -- openai-chat ------------------------------------------------------------------------------


def test_openai_chat_valid_payload_has_no_problems() -> None:
    payload = chat(USER, calls(tc("a"), tc("b")), result("a"), result("b"), USER)
    assert validate(payload, "openai-chat") == []


def test_openai_chat_unanswered_call_is_reported_in_plain_words() -> None:
    problems = validate(chat(USER, calls(tc("call_1")), USER), "openai-chat")
    assert [p.code for p in problems] == ["unanswered_call"]
    assert problems[0].path == "messages[1].tool_calls[0]"
    assert problems[0].message == (
        "messages[1].tool_calls[0]: assistant tool call 'call_1' is not followed by a tool "
        "message answering it (next: messages[2])"
    )


def test_openai_chat_result_must_come_right_after_the_call() -> None:
    payload = chat(USER, calls(tc("a")), USER, result("a"))
    assert codes(payload, "openai-chat") == ["unanswered_call", "unknown_result"]


def test_openai_chat_answer_before_another_message_and_all_ids_answered() -> None:
    payload = chat(
        USER, calls(tc("a"), tc("b")), result("a"), {"role": "assistant", "content": "x"}
    )
    assert codes(payload, "openai-chat") == ["unanswered_call"]
    assert codes(chat(USER, calls(tc("a")), result("a"), result("a")), "openai-chat") == [
        "duplicate_result"
    ]
    assert codes(chat(USER, calls(tc("a")), result("a"), result("zzz")), "openai-chat") == [
        "unknown_result"
    ]


def test_openai_chat_ids_must_be_unique_non_empty_and_short() -> None:
    duplicate = chat(USER, calls(tc("a")), result("a"), USER, calls(tc("a")), result("a"))
    assert codes(duplicate, "openai-chat") == ["duplicate_id"]
    assert "empty_id" in codes(chat(USER, calls(tc("")), result("")), "openai-chat")
    long_id = "x" * 65
    assert codes(chat(USER, calls(tc(long_id)), result(long_id)), "openai-chat") == ["bad_id"]


@pytest.mark.parametrize("arguments", [{"q": 1}, "not json", "[1, 2]", None])
def test_openai_chat_arguments_must_be_a_json_object_string(arguments: Any) -> None:
    payload = chat(USER, calls(tc("a", arguments)), result("a"))
    assert codes(payload, "openai-chat") == ["bad_arguments"]


def test_openai_chat_assistant_message_needs_content_or_calls() -> None:
    payload = chat(USER, {"role": "assistant", "content": None})
    assert codes(payload, "openai-chat") == ["empty_content"]
    assert codes(chat(), "openai-chat") == ["empty_payload"]
    assert codes({"messages": "nope"}, "openai-chat") == ["empty_payload"]
    assert codes([], "openai-chat") == ["bad_shape"]


def test_openai_chat_tools_are_checked() -> None:
    fn = {"name": "search", "parameters": {"type": "object"}}
    payload = {
        "messages": [USER],
        "tools": [
            {"type": "function", "function": fn},
            {"type": "function", "function": fn},
            {"type": "function", "function": {"name": "bad name!"}},
            {"type": "function", "function": {"name": "ok", "parameters": {"properties": {}}}},
        ],
    }
    assert codes(payload, "openai-chat") == ["bad_tool_schema", "duplicate_tool", "bad_tool_name"]


# -- openai-responses -------------------------------------------------------------------------


def fc(call_id: str, arguments: Any = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "search", "arguments": arguments}


def out(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_responses_valid_payload_has_no_problems() -> None:
    payload = {"input": [USER, fc("a"), fc("b"), out("a"), out("b"), USER]}
    assert validate(payload, "openai-responses") == []


def test_responses_breakages() -> None:
    def check(*items: dict[str, Any]) -> list[str]:
        return codes({"input": list(items)}, "openai-responses")

    assert check(USER, fc("a")) == ["unanswered_call"]
    assert check(USER, fc("a"), USER, out("a")) == ["unanswered_call", "unknown_result"]
    assert check(USER, fc("a"), out("a"), out("a")) == ["duplicate_result"]
    assert check(USER, out("ghost")) == ["unknown_result"]
    assert check(USER, fc("a"), out("a"), fc("a"), out("a")) == ["duplicate_id"]
    assert check(USER, fc("a", {"q": 1}), out("a")) == ["bad_arguments"]
    assert check(USER, fc(""), out("")) == ["empty_id", "empty_id"]
    assert check() == ["empty_payload"]
    tools = {"input": [USER], "tools": [{"type": "function", "name": "s", "strict": False}]}
    assert codes(tools, "openai-responses") == ["bad_tool_schema"]


# -- anthropic --------------------------------------------------------------------------------


def use(call_id: str, inp: Any = None) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": call_id,
        "name": "search",
        "input": {} if inp is None else inp,
    }


def res(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def msg(role: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def anthropic(*messages: dict[str, Any]) -> list[str]:
    return codes({"messages": list(messages)}, "anthropic")


def test_anthropic_valid_payload_has_no_problems() -> None:
    payload = {
        "system": "s",
        "messages": [
            USER,
            msg("assistant", text("let me look"), use("a"), use("b")),
            msg("user", res("a"), res("b"), text("thanks")),
            {"role": "assistant", "content": "done"},
        ],
        "tools": [{"name": "search", "input_schema": {"type": "object"}}],
    }
    assert validate(payload, "anthropic") == []


def test_anthropic_roles_alternate_and_start_with_user() -> None:
    assert anthropic({"role": "assistant", "content": "hi"}, USER) == ["first_not_user"]
    assert anthropic(USER, USER) == ["role_order"]
    assert anthropic({"role": "system", "content": "x"}, USER) == [
        "bad_shape",
        "first_not_user",
    ]


def test_anthropic_tool_results_belong_first_in_the_very_next_user_message() -> None:
    assert anthropic(USER, msg("assistant", use("a"))) == ["unanswered_call"]
    assert anthropic(USER, msg("assistant", use("a")), msg("user", text("x"), res("a"))) == [
        "result_not_first"
    ]
    late = anthropic(
        USER,
        msg("assistant", use("a")),
        msg("user", text("x")),
        msg("assistant", text("y")),
        msg("user", res("a")),
    )
    assert late == ["unanswered_call", "unknown_result"]
    assert anthropic(USER, msg("assistant", use("a"), use("b")), msg("user", res("a"))) == [
        "unanswered_call"
    ]


def test_anthropic_ids_inputs_and_empty_text() -> None:
    assert anthropic(USER, msg("assistant", use("tc.01")), msg("user", res("tc.01"))) == ["bad_id"]
    assert anthropic(USER, msg("assistant", use("a", "[]")), msg("user", res("a"))) == [
        "bad_arguments"
    ]
    assert anthropic(USER, msg("assistant", text(""))) == ["empty_content"]
    assert anthropic({"role": "user", "content": "  "}) == ["empty_content"]
    duplicate = anthropic(
        USER,
        msg("assistant", use("a")),
        msg("user", res("a")),
        msg("assistant", use("a")),
        msg("user", res("a")),
    )
    assert duplicate == ["duplicate_id"]
    assert anthropic(msg("user", res("ghost"))) == ["unknown_result"]
    assert anthropic() == ["empty_payload"]


def test_anthropic_tool_schemas_need_an_object_type() -> None:
    payload = {"messages": [USER], "tools": [{"name": "search", "input_schema": {}}]}
    assert codes(payload, "anthropic") == ["bad_tool_schema"]


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError):
        validate({}, "gemini")


# -- naive replay lint ------------------------------------------------------------------------


def troubled_history():  # type: ignore[no-untyped-def]
    return history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (
                call(3, "", seq=0, t=2),
                call(4, "dup", seq=1, t=2),
                call(5, "missing", round=1, t=4, response=None),
            ),
        ),
        user(6, "again", 10),
        assistant(7, "x", 11, (call(8, "dup", t=12),), status="failed"),
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_naive_replay_shows_what_the_raw_rows_would_break(fmt: str) -> None:
    options = ReplayOptions(format=fmt, freshness_seconds=None)
    problems = {p.code for p in naive_replay_problems(troubled_history(), options)}
    assert {"empty_id", "duplicate_id", "unanswered_call"} <= problems
    memo = Memo()
    assert validate(replay(troubled_history(), options).payload, fmt, memo) == []
    # With the memo of the replay's validation (as the export runs it), the same problems.
    assert naive_replay_problems(troubled_history(), options, memo) == naive_replay_problems(
        troubled_history(), options
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_naive_replay_of_a_clean_history_is_fine(fmt: str) -> None:
    clean = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "a", t=2),)))
    options = ReplayOptions(format=fmt)
    assert naive_replay_problems(clean, options) == []
    payload = naive_payload(clean, options)
    assert "a" in str(payload)


def test_naive_payload_keeps_failed_runs_and_stale_results() -> None:
    options = ReplayOptions(freshness_seconds=1)
    payload = naive_payload(troubled_history(), options)
    ids = [tc["id"] for m in payload["messages"] for tc in m.get("tool_calls", [])]
    assert ids == ["", "dup", "missing", "dup"]


def test_validate_does_not_modify_the_payload() -> None:
    payload = chat(USER, calls(tc("a")), USER)
    before = copy.deepcopy(payload)
    validate(payload, "openai-chat")
    assert payload == before


# -- the naive lint finds what validating the naive payload finds ---------------------------------

_ODD_ARGUMENTS = st.sampled_from(
    # (arguments, arguments_json as the loader would pass it; None: encoded by the replay)
    [
        ([1], None),
        ("text", None),
        (3.5, None),
        ({"q": "x"}, '{"q":"x"}'),
        ({"q": "x"}, "[1]"),  # a stored string that is no object: checked as sent
        ({"deep": [[[]]]}, "not json"),
    ]
)


@st.composite
def odd_histories(draw: st.DrawFn) -> History:
    """``histories()`` with calls whose names, arguments and texts the loader could still
    hand over: an empty name, arguments that are no object, whitespace-only texts."""
    h = draw(histories())
    messages = []
    for m in h.messages:
        calls = []
        for c in m.tool_calls:
            if draw(st.integers(0, 4)) == 0:
                arguments, arguments_json = draw(_ODD_ARGUMENTS)
                c = replace(c, arguments=arguments, arguments_json=arguments_json)
            if draw(st.integers(0, 9)) == 0:
                c = replace(c, function_name="")
            calls.append(c)
        content = m.content
        if draw(st.integers(0, 5)) == 0:
            content = draw(st.sampled_from([" ", "\n", "", None]))
        messages.append(replace(m, tool_calls=tuple(calls), content=content))
    return replace(h, messages=tuple(messages))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd_histories(), st.sampled_from(FORMATS), st.data())
def test_naive_lint_is_the_validation_of_the_naive_payload(
    h: History, fmt: str, data: st.DataObject
) -> None:
    o = data.draw(options(fmt=fmt))
    expected = validate(naive_payload(h, o), fmt)
    assert naive_replay_problems(h, o) == expected
    # With a memo that the replay's own validation filled first, as the export runs it.
    memo = Memo()
    validate(replay(h, o).payload, fmt, memo)
    assert naive_replay_problems(h, o, memo) == expected
