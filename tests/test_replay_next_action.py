"""The next action (webapp/replay/next_action.py): read from answers the official SDKs' own model
classes build, recorded in a stored history at the replay's cut, and the two compared.

The comparison's categories are what a study reports, so their rules are property-tested: every
pair of actions gets exactly one category, the order of calls within a round never matters,
``same_calls`` holds exactly when the calls are equal as canonical JSON, and swapping the sides
swaps "called instead of answering" with "answered instead of calling" and nothing else.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anthropic.types as anthropic_types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.completion_usage import CompletionUsage, PromptTokensDetails
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from webapp.replay import ServiceCall, make_synthetic_history, replay, turn_starts
from webapp.replay.build import sorted_messages
from webapp.replay.export import resolve_as_of, turn_times
from webapp.replay.next_action import (
    CATEGORIES,
    ActionCall,
    MalformedAnswer,
    NextAction,
    Usage,
    compare,
    json_changes,
    parse_answer,
    parse_usage,
    recorded_next_action,
    word_diff,
)
from webapp.replay.options import ReplayOptions

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import assistant, at, call, histories, history, user
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import assistant, at, call, histories, history, user

FORMATS = ("openai-chat", "openai-responses", "anthropic")
CATEGORY_NAMES = [name for name, _ in CATEGORIES]

# -- strategies -------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**9), 10**9),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
tool_names = st.sampled_from(["search", "lookup", "get_weather", "sql_query"])
call_ids = st.from_regex(r"call_[a-zA-Z0-9]{1,8}", fullmatch=True)


@st.composite
def action_calls(draw: st.DrawFn, *, with_ids: bool = True) -> ActionCall:
    call_id = draw(call_ids) if with_ids else None
    return ActionCall(draw(tool_names), draw(json_objects), call_id)


texts = st.one_of(st.none(), st.just(""), st.just("  \n"), st.text(min_size=1, max_size=40))


@st.composite
def provider_actions(draw: st.DrawFn) -> tuple[list[ActionCall], str | None]:
    """What a model says: calls (maybe none) and text (maybe none, maybe blank)."""
    return draw(st.lists(action_calls(), max_size=3)), draw(texts)


def expected_action(calls: list[ActionCall], text: str | None) -> NextAction:
    text = text if text is not None and text.strip() else None
    if calls:
        return NextAction("calls", tuple(calls), text)
    return NextAction("answer", (), text) if text is not None else NextAction("empty")


# -- answers built by the SDKs' own classes ------------------------------------------------------


def chat_answer(calls: list[ActionCall], text: str | None) -> dict[str, Any]:
    tool_calls = [
        ChatCompletionMessageFunctionToolCall(
            id=c.id or "call_x",
            type="function",
            function=Function(name=c.name, arguments=json.dumps(c.arguments)),
        )
        for c in calls
    ]
    message = ChatCompletionMessage(role="assistant", content=text, tool_calls=tool_calls or None)
    completion = ChatCompletion(
        id="chatcmpl-1",
        created=0,
        model="gpt-test",
        object="chat.completion",
        choices=[Choice(index=0, finish_reason="tool_calls" if calls else "stop", message=message)],
        usage=CompletionUsage(
            prompt_tokens=120,
            completion_tokens=8,
            total_tokens=128,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=64),
        ),
    )
    return completion.model_dump(mode="json")


def responses_answer(calls: list[ActionCall], text: str | None) -> dict[str, Any]:
    output: list[Any] = [ResponseReasoningItem(id="rs_1", type="reasoning", summary=[])]
    if text is not None:
        output.append(
            ResponseOutputMessage(
                id="msg_1",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
        )
    output.extend(
        ResponseFunctionToolCall(
            type="function_call",
            id=f"fc_{i}",
            call_id=c.id or "call_x",
            name=c.name,
            arguments=json.dumps(c.arguments),
            status="completed",
        )
        for i, c in enumerate(calls)
    )
    response = Response(
        id="resp_1",
        created_at=0,
        model="gpt-test",
        object="response",
        output=output,
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        usage=ResponseUsage(
            input_tokens=120,
            output_tokens=8,
            total_tokens=128,
            input_tokens_details=InputTokensDetails(cached_tokens=64, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        ),
    )
    assert response.output_text == (text or "")  # the SDK's own reading of the text agrees
    return response.model_dump(mode="json")


def anthropic_answer(calls: list[ActionCall], text: str | None) -> dict[str, Any]:
    content: list[Any] = []
    if text is not None:
        content.append(anthropic_types.TextBlock(type="text", text=text))
    content.extend(
        anthropic_types.ToolUseBlock(
            type="tool_use", id=c.id or "toolu_x", name=c.name, input=c.arguments
        )
        for c in calls
    )
    message = anthropic_types.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-test",
        content=content,
        stop_reason="tool_use" if calls else "end_turn",
        stop_sequence=None,
        usage=anthropic_types.Usage(
            input_tokens=20,
            output_tokens=8,
            cache_read_input_tokens=64,
            cache_creation_input_tokens=36,
        ),
    )
    return message.model_dump(mode="json")


BUILDERS = {
    "openai-chat": chat_answer,
    "openai-responses": responses_answer,
    "anthropic": anthropic_answer,
}


@pytest.mark.parametrize("fmt", FORMATS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action=provider_actions())
def test_an_sdk_answer_reads_as_the_action_it_holds(
    fmt: str, action: tuple[list[ActionCall], str | None]
) -> None:
    calls, text = action
    assert parse_answer(fmt, BUILDERS[fmt](calls, text)) == expected_action(calls, text)


@pytest.mark.parametrize("fmt", FORMATS)
def test_text_written_before_the_calls_stays_beside_them(fmt: str) -> None:
    calls = [ActionCall("lookup_order", {"order_id": 42}, "call_1")]
    action = parse_answer(fmt, BUILDERS[fmt](calls, "Let me look that up."))
    assert action.kind == "calls"
    assert action.text == "Let me look that up."
    assert action.calls == tuple(calls)


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses"])
def test_arguments_that_are_not_a_json_object_are_kept_as_the_text_sent(fmt: str) -> None:
    answer = BUILDERS[fmt]([ActionCall("search", {}, "call_1")], None)
    for bad in ['{"q": "unterminated', "[1, 2]", "", "null"]:
        if fmt == "openai-chat":
            answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = bad
        else:
            answer["output"][-1]["arguments"] = bad
        assert parse_answer(fmt, answer).calls[0].arguments == bad


def test_a_refusal_is_what_the_model_answered() -> None:
    answer = chat_answer([], None)
    answer["choices"][0]["message"]["refusal"] = "I can't help with that."
    assert parse_answer("openai-chat", answer) == NextAction(
        "answer", (), "I can't help with that."
    )


@pytest.mark.parametrize(
    ("fmt", "breaks", "says"),
    [
        ("openai-chat", lambda a: a.pop("choices"), "choices must be a list"),
        ("openai-chat", lambda a: a.update(choices=[]), "choices is empty"),
        ("openai-chat", lambda a: a["choices"][0].update(message="hi"), "choices[0].message"),
        (
            "openai-chat",
            lambda a: a["choices"][0]["message"]["tool_calls"][0]["function"].pop("name"),
            "tool_calls[0].function.name must be a string",
        ),
        (
            "openai-chat",
            lambda a: a["choices"][0]["message"]["tool_calls"][0]["function"].update(arguments={}),
            "arguments must be a string of JSON",
        ),
        ("openai-chat", lambda a: a["choices"][0]["message"].update(content=7), "content must be"),
        ("openai-responses", lambda a: a.pop("output"), "output must be a list"),
        ("openai-responses", lambda a: a["output"].append("text"), "must be an object"),
        ("openai-responses", lambda a: a["output"][-1].pop("name"), ".name must be a string"),
        ("openai-responses", lambda a: a["output"][-1].pop("type"), ".type must be a string"),
        (
            "openai-responses",
            lambda a: a["output"][1]["content"][0].update(text=None),
            "content[0].text must be a string",
        ),
        ("anthropic", lambda a: a.update(content="hello"), "content must be a list"),
        ("anthropic", lambda a: a["content"][1].pop("input"), "content[1].input is missing"),
        ("anthropic", lambda a: a["content"][0].update(text=["x"]), "content[0].text must be"),
    ],
)
def test_an_answer_of_another_shape_says_what_was_wrong(fmt: str, breaks: Any, says: str) -> None:
    answer = BUILDERS[fmt]([ActionCall("search", {"q": "x"}, "call_1")], "text")
    breaks(answer)
    with pytest.raises(MalformedAnswer) as caught:
        parse_answer(fmt, answer)
    assert says in str(caught.value)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("answer", [None, [], "text", 3])
def test_an_answer_that_is_not_an_object_is_malformed(fmt: str, answer: Any) -> None:
    with pytest.raises(MalformedAnswer):
        parse_answer(fmt, answer)


def test_usage_by_each_providers_field_names() -> None:
    assert parse_usage("openai-chat", chat_answer([], "x")) == Usage(120, 8, 64, None)
    assert parse_usage("openai-responses", responses_answer([], "x")) == Usage(120, 8, 64, 0)
    # Anthropic counts cache reads and writes beside input_tokens: the prompt is all three.
    assert parse_usage("anthropic", anthropic_answer([], "x")) == Usage(120, 8, 64, 36)
    for fmt in FORMATS:
        assert parse_usage(fmt, {}) == Usage(None, None, None, None)
        assert parse_usage(fmt, {"usage": {"input_tokens": "12", "prompt_tokens": True}}) == Usage(
            None, None, None, None
        )


@settings(max_examples=100, deadline=None)
@given(action=provider_actions())
def test_a_next_action_comes_back_from_its_json(
    action: tuple[list[ActionCall], str | None],
) -> None:
    a = expected_action(*action)
    assert NextAction.from_json(json.loads(json.dumps(a.to_json()))) == a


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"kind": "calls", "calls": [], "text": None},
        {"kind": "answer", "calls": [], "text": None},
        {"kind": "maybe", "calls": [], "text": None},
        {"kind": "calls", "calls": [{"arguments": {}}], "text": None},
        {"kind": "empty", "calls": "x", "text": None},
    ],
)
def test_a_stored_action_of_another_shape_is_refused(data: Any) -> None:
    with pytest.raises(MalformedAnswer):
        NextAction.from_json(data)


# -- what the agent did -----------------------------------------------------------------------


def two_turns():
    """Turn 1: two rounds then an answer; turn 2: a plain answer."""
    return history(
        user(1, "Where is order 42?", 0),
        assistant(
            2,
            "It ships tomorrow.",
            1,
            (
                call(3, "c1", name="lookup_order", args={"id": 42}, t=2),
                call(4, "c2", name="search", args={"q": "42"}, seq=1, t=2),
                call(5, "c3", name="track", args=None, round=1, t=5),
            ),
            # The last service call wrote the answer, at 7 s.
            services=(
                ServiceCall(0, "m", created_at=at(1.5)),
                ServiceCall(1, "m", created_at=at(4)),
                ServiceCall(2, "m", created_at=at(7)),
            ),
        ),
        user(6, "Thanks!", 10),
        assistant(7, "You're welcome.", 11),
    )


def test_at_a_turn_the_next_action_is_the_first_round_of_the_run_answering_it() -> None:
    h = two_turns()
    as_of = resolve_as_of("turn:1", now=at(100), turn_times=turn_times(h))
    assert recorded_next_action(h, as_of) == NextAction(
        "calls",
        (
            ActionCall("lookup_order", {"id": 42}, "c1"),
            ActionCall("search", {"q": "42"}, "c2"),
        ),
    )
    as_of = resolve_as_of("turn:2", now=at(100), turn_times=turn_times(h))
    assert recorded_next_action(h, as_of) == NextAction("answer", (), "You're welcome.")


def test_nothing_follows_the_latest_moment() -> None:
    h = two_turns()
    assert recorded_next_action(h, None) is None
    assert recorded_next_action(h, at(11)) is None
    # Between the answer of turn 1 and the question of turn 2: the next message is the user's.
    assert recorded_next_action(h, at(8)) is None


def test_a_cut_inside_a_run_depends_on_the_persistence_mode() -> None:
    h = two_turns()
    # At 3 s round 0 is complete (results back at 3 s), round 1 not yet made.
    per_call = recorded_next_action(h, at(3), persistence="per-service-call")
    assert per_call == NextAction("calls", (ActionCall("track", {}, "c3"),))  # None args: {}
    # At 2.5 s round 0 was asked for but its results were not back: the replay holds none of it,
    # and the round is still what comes next.
    assert recorded_next_action(h, at(2.5), persistence="per-service-call") == (
        recorded_next_action(h, at(0))
    )
    options = ReplayOptions(as_of=at(2.5), freshness_seconds=None, persistence="per-service-call")
    assert "lookup_order" not in json.dumps(replay(h, options).payload)
    # per-run: the unfinished run is not replayed at all, so the agent's next action is its start.
    assert recorded_next_action(h, at(3)) == recorded_next_action(h, at(0))
    # Every round back, the answer not yet written (nor replayed).
    assert recorded_next_action(h, at(6.5), persistence="per-service-call") == NextAction(
        "answer", (), "It ships tomorrow."
    )
    options = ReplayOptions(as_of=at(6.5), freshness_seconds=None, persistence="per-service-call")
    assert "It ships tomorrow." not in json.dumps(replay(h, options).payload)
    # Once the last service call is stored the run is complete: the replay holds its answer, and
    # what happened next is the user's next question.
    assert recorded_next_action(h, at(7), persistence="per-service-call") is None
    options = ReplayOptions(as_of=at(7), freshness_seconds=None, persistence="per-service-call")
    assert "It ships tomorrow." in json.dumps(replay(h, options).payload)


def test_the_answer_to_a_turn_agrees_with_what_the_replay_at_that_turn_leaves_out() -> None:
    h = two_turns()
    as_of = turn_times(h)[0]
    payload = replay(h, ReplayOptions(as_of=as_of, freshness_seconds=None)).payload
    sent = json.dumps(payload)
    action = recorded_next_action(h, as_of)
    assert action is not None
    for c in action.calls:
        assert c.id not in sent  # the recorded action is not part of what the model receives
    assert payload["messages"][-1] == {"role": "user", "content": "Where is order 42?"}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000), turns=st.integers(1, 6), per_turn=st.integers(0, 7))
def test_at_every_turn_of_a_synthetic_conversation_the_next_action_is_that_turns_run(
    seed: int, turns: int, per_turn: int
) -> None:
    h = make_synthetic_history(turns, per_turn, seed)
    messages = sorted_messages(h)
    for n, start in enumerate(turn_starts(h), 1):
        as_of = resolve_as_of(f"turn:{n}", now=at(10**6), turn_times=turn_times(h))
        assert as_of == start.created_at
        after = messages[
            messages.index(next(m for m in messages if m.external_id == start.message_id)) + 1
        ]
        action = recorded_next_action(h, as_of)
        if after.tool_calls:
            first = min(c.round_index for c in after.tool_calls)
            names = [
                c.function_name
                for c in sorted(after.tool_calls, key=lambda c: (c.round_index, c.sequence_index))
                if c.round_index == first
            ]
            assert action is not None and action.kind == "calls"
            assert [c.name for c in action.calls] == names
        elif after.content and after.content.strip():
            assert action == NextAction("answer", (), after.content)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    h=histories(), moment=st.floats(0, 3000), mode=st.sampled_from(["per-run", "per-service-call"])
)
def test_the_recorded_action_is_made_after_the_cut(h: Any, moment: float, mode: str) -> None:
    """Whatever the history, the recorded next action is something the agent did after as_of:
    its calls were made after it (or belong to a round not complete at it, or to a run not
    finished at it, in per-run mode), and only assistant content is ever returned."""
    as_of = at(moment)
    action = recorded_next_action(h, as_of, persistence=mode)
    if action is None:
        return
    assert action.kind in ("calls", "answer")
    owners = [
        m
        for m in h.messages
        if m.role == "assistant"
        and (
            (action.kind == "answer" and m.content == action.text)
            or (
                action.kind == "calls"
                and {c.id for c in action.calls} <= {c.external_id or None for c in m.tool_calls}
            )
        )
    ]
    assert owners
    assert any(
        m.created_at > as_of
        or any(
            c.created_at > as_of or (c.response_created_at or c.created_at) > as_of
            for c in m.tool_calls
        )
        or any(s.created_at is not None and s.created_at > as_of for s in m.service_calls)
        for m in owners
    )


# -- the comparison ---------------------------------------------------------------------------

actions = st.one_of(
    st.lists(action_calls(with_ids=False), min_size=1, max_size=3).map(
        lambda calls: NextAction("calls", tuple(calls))
    ),
    st.text(min_size=1, max_size=30).filter(str.strip).map(lambda t: NextAction("answer", (), t)),
    st.just(NextAction("empty")),
)
SWAPPED = {
    "called_instead_of_answering": "answered_instead_of_calling",
    "answered_instead_of_calling": "called_instead_of_answering",
}


@settings(max_examples=120, deadline=None)
@given(replayed=actions, recorded=st.one_of(st.none(), actions))
def test_every_pair_of_actions_gets_exactly_one_category(
    replayed: NextAction, recorded: NextAction | None
) -> None:
    result = compare(replayed, recorded)
    assert result.category in CATEGORY_NAMES
    assert result.label == dict(CATEGORIES)[result.category]
    if recorded is None:
        assert result.category == "no_recorded_action"
    elif replayed.kind == "empty":
        assert result.category == "empty_answer"
    elif replayed.kind == "calls" and recorded.kind != "calls":
        assert result.category == "called_instead_of_answering"
    elif replayed.kind == "answer" and recorded.kind == "calls":
        assert result.category == "answered_instead_of_calling"
    assert bool(result.argument_diffs) == (result.category == "same_tools_other_arguments")
    assert bool(result.word_diff) <= (result.category == "different_answer")
    json.dumps(result.to_json())  # JSON all the way down


@settings(max_examples=120, deadline=None)
@given(a=actions.filter(lambda a: a.kind != "empty"), b=actions.filter(lambda a: a.kind != "empty"))
def test_swapping_the_sides_swaps_only_who_called_and_who_answered(
    a: NextAction, b: NextAction
) -> None:
    one, other = compare(a, b).category, compare(b, a).category
    assert other == SWAPPED.get(one, one)


def canonical_multiset(action: NextAction) -> Counter[tuple[str, str]]:
    return Counter(
        (c.name, json.dumps(c.arguments, sort_keys=True, separators=(",", ":")))
        for c in action.calls
    )


@settings(max_examples=120, deadline=None)
@given(
    calls=st.lists(action_calls(with_ids=False), min_size=1, max_size=4),
    other=st.lists(action_calls(with_ids=False), min_size=1, max_size=4),
    data=st.data(),
)
def test_same_calls_exactly_when_equal_as_canonical_json_in_any_order(
    calls: list[ActionCall], other: list[ActionCall], data: st.DataObject
) -> None:
    a = NextAction("calls", tuple(calls))
    b = NextAction("calls", tuple(other))
    same = canonical_multiset(a) == canonical_multiset(b)
    assert (compare(a, b).category == "same_calls") == same
    # Any order within the round, any key order within the arguments, and other ids.
    shuffled = data.draw(st.permutations(calls))
    reordered = tuple(
        ActionCall(
            c.name,
            dict(reversed(list(c.arguments.items())))
            if isinstance(c.arguments, dict)
            else c.arguments,
            f"other_{i}",
        )
        for i, c in enumerate(shuffled)
    )
    assert compare(NextAction("calls", reordered), a).category == "same_calls"
    assert compare(NextAction("calls", reordered), b).category == compare(a, b).category


@settings(max_examples=100, deadline=None)
@given(calls=st.lists(action_calls(with_ids=False), min_size=1, max_size=4), data=st.data())
def test_other_arguments_are_diffed_call_by_call_and_only_where_they_differ(
    calls: list[ActionCall], data: st.DataObject
) -> None:
    changed_at = data.draw(st.integers(0, len(calls) - 1))
    new_args = data.draw(json_objects)
    old = calls[changed_at]
    changed = list(calls)
    changed[changed_at] = ActionCall(old.name, new_args)
    replayed = NextAction("calls", tuple(data.draw(st.permutations(changed))))
    result = compare(replayed, NextAction("calls", tuple(calls)))
    if canonical_multiset(replayed) == canonical_multiset(NextAction("calls", tuple(calls))):
        assert result.category == "same_calls"
        return
    assert result.category == "same_tools_other_arguments"
    (diff,) = result.argument_diffs  # the equal calls pair with each other
    assert diff.name == old.name
    assert diff.changes
    assert replayed.calls[diff.replayed_index].name == old.name
    assert calls[diff.recorded_index].name == old.name


def test_an_argument_diff_names_the_paths_that_changed() -> None:
    recorded = NextAction(
        "calls",
        (ActionCall("search", {"q": "order 42", "filters": {"year": 2024, "tags": ["a", "b"]}}),),
    )
    replayed = NextAction(
        "calls",
        (
            ActionCall(
                "search", {"q": "order 42", "filters": {"year": 2025, "tags": ["a"]}, "limit": 5}
            ),
        ),
    )
    result = compare(replayed, recorded)
    assert result.category == "same_tools_other_arguments"
    assert result.to_json()["argument_diffs"] == [
        {
            "name": "search",
            "recorded_index": 0,
            "replayed_index": 0,
            "changes": [
                {"path": "/filters/tags/1", "recorded": "b"},
                {"path": "/filters/year", "recorded": 2024, "replayed": 2025},
                {"path": "/limit", "replayed": 5},
            ],
        }
    ]


def test_json_changes_tell_true_from_one_and_escape_pointers() -> None:
    assert json_changes({"a": True}, {"a": 1}) == json_changes({"a": True}, {"a": 1})
    assert [c.path for c in json_changes({"a": True}, {"a": 1})] == ["/a"]
    assert [c.path for c in json_changes({"a/b~c": 1}, {"a/b~c": 2})] == ["/a~1b~0c"]
    assert [c.path for c in json_changes("raw text", {"q": 1})] == [""]
    assert json_changes({"b": 1, "a": [1, {"x": None}]}, {"a": [1, {"x": None}], "b": 1}) == []


def test_other_tools_and_the_four_kinds_of_disagreement() -> None:
    search = NextAction("calls", (ActionCall("search", {"q": "x"}),))
    lookup = NextAction("calls", (ActionCall("lookup", {"q": "x"}),))
    twice = NextAction(
        "calls", (ActionCall("search", {"q": "x"}), ActionCall("search", {"q": "x"}))
    )
    answer = NextAction("answer", (), "It ships   tomorrow.\n")
    assert compare(lookup, search).category == "other_tools"
    assert compare(twice, search).category == "other_tools"  # the multiset of names differs
    assert compare(search, answer).category == "called_instead_of_answering"
    assert compare(answer, search).category == "answered_instead_of_calling"
    assert compare(NextAction("answer", (), "It ships tomorrow."), answer).category == "same_answer"
    assert compare(NextAction("empty"), answer).category == "empty_answer"
    assert compare(NextAction("empty"), None).category == "no_recorded_action"
    different = compare(NextAction("answer", (), "It ships on Friday."), answer)
    assert different.category == "different_answer"
    assert different.word_diff == (
        ("equal", "It ships"),
        ("delete", "tomorrow."),
        ("insert", "on Friday."),
    )


@settings(max_examples=120, deadline=None)
@given(a=st.text(max_size=60), b=st.text(max_size=60))
def test_a_word_diff_rebuilds_both_texts(a: str, b: str) -> None:
    ops = word_diff(a, b)
    assert all(op in ("equal", "insert", "delete") and text for op, text in ops)
    recorded = " ".join(text for op, text in ops if op != "insert").split()
    replayed = " ".join(text for op, text in ops if op != "delete").split()
    assert recorded == a.split()
    assert replayed == b.split()


@settings(max_examples=100, deadline=None)
@given(
    words=st.lists(
        st.text(alphabet="abc xyz", min_size=1, max_size=5).filter(str.strip), min_size=1
    ),
    gaps=st.data(),
)
def test_whitespace_alone_never_makes_a_different_answer(
    words: list[str], gaps: st.DataObject
) -> None:
    text = " ".join(words)
    spaced = "".join(w + gaps.draw(st.sampled_from([" ", "\n", "\t ", "  "])) for w in words)
    assert (
        compare(NextAction("answer", (), spaced), NextAction("answer", (), text)).category
        == "same_answer"
    )
