"""One test (or a few) per replay rule, with the edge cases each rule names."""

from __future__ import annotations

import json
import re

import pytest

from webapp.replay import (
    Diagnostic,
    ReplayOptions,
    ReplayResult,
    ServiceCall,
    ToolDefinition,
    heuristic_tokens,
    replay,
    turn_starts,
    validate,
)

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import (
        SEARCH_TOOL,
        assistant,
        at,
        call,
        history,
        sources,
        system_msg,
        user,
    )
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import (
        SEARCH_TOOL,
        assistant,
        at,
        call,
        history,
        sources,
        system_msg,
        user,
    )

NO_WINDOW = ReplayOptions(freshness_seconds=None)


def run(h, **kw) -> ReplayResult:  # type: ignore[no-untyped-def]
    kw.setdefault("freshness_seconds", None)
    result = replay(h, ReplayOptions(**kw))
    fmt = kw.get("format", "openai-chat")
    assert validate(result.payload, fmt) == [], result.payload
    return result


def kinds(result: ReplayResult) -> list[str]:
    return [d.kind for d in result.diagnostics]


def of_kind(result: ReplayResult, kind: str) -> list[Diagnostic]:
    return [d for d in result.diagnostics if d.kind == kind]


def tool_call_ids(messages: list[dict]) -> list[list[str]]:  # type: ignore[type-arg]
    return [[tc["id"] for tc in m["tool_calls"]] for m in messages if m.get("tool_calls")]


# -- rule 1: rounds ---------------------------------------------------------------------------


def test_calls_are_grouped_by_round_in_sequence_order_then_final_text() -> None:
    h = history(
        user(1, "Onboard TechCorp", 0),
        assistant(
            2,
            "TechCorp is onboarded.",
            1,
            (
                call(5, "c_r1s0", round=1, seq=0, t=4),
                call(4, "c_r0s1", round=0, seq=1, t=2),
                call(3, "c_r0s0", round=0, seq=0, t=2),
            ),
        ),
    )
    messages = run(h).payload["messages"]
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert tool_call_ids(messages) == [["c_r0s0", "c_r0s1"], ["c_r1s0"]]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [
        "c_r0s0",
        "c_r0s1",
        "c_r1s0",
    ]
    assert messages[-1] == {"role": "assistant", "content": "TechCorp is onboarded."}


def test_messages_are_sorted_by_time_whatever_the_input_order() -> None:
    h = history(assistant(2, "second", 5), user(1, "first", 0), user(3, "third", 9))
    assert [m["content"] for m in run(h).payload["messages"]] == ["first", "second", "third"]


def test_empty_final_text_is_not_replayed() -> None:
    h = history(user(1, "q", 0), assistant(2, "", 1, (call(3, "c1", t=2),)))
    messages = run(h, trim_trailing=False).payload["messages"]
    assert messages[-1]["role"] == "tool"


# -- rule 2: missing responses ----------------------------------------------------------------


def test_round_where_no_call_has_a_response_is_skipped_entirely() -> None:
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (
                call(3, "a", round=0, seq=0, t=2, response=None),
                call(4, "b", round=0, seq=1, t=2, response=None),
                call(5, "c", round=1, seq=0, t=4),
            ),
        ),
    )
    result = run(h)
    assert tool_call_ids(result.payload["messages"]) == [["c"]]
    skipped = of_kind(result, "round_skipped")
    assert [(d.message_id, d.round_index) for d in skipped] == [("a2", 0)]
    assert [d.call_id for d in of_kind(result, "response_missing")] == ["a", "b"]
    assert result.stats["calls_omitted"] == {"response_missing": 2}


def test_call_without_response_is_left_out_with_its_tool_call_entry() -> None:
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (call(3, "a", seq=0, t=2), call(4, "b", seq=1, t=2, response=None)),
        ),
    )
    messages = run(h).payload["messages"]
    assert tool_call_ids(messages) == [["a"]]
    assert [m.get("tool_call_id") for m in messages if m["role"] == "tool"] == ["a"]


def test_empty_string_is_a_response() -> None:
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "a", t=2, response=""),)))
    for fmt in ("openai-chat", "openai-responses", "anthropic"):
        result = run(h, format=fmt)
        assert result.stats["calls_included"] == 1, fmt
    chat = run(h).payload["messages"]
    assert {"role": "tool", "tool_call_id": "a", "content": ""} in chat
    anthropic = run(h, format="anthropic").payload["messages"]
    assert anthropic[2]["content"] == [{"type": "tool_result", "tool_use_id": "a"}]


def test_response_created_after_as_of_counts_as_missing() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, None, 1, (call(3, "a", t=2, rt=50),), status="in_progress"),
    )
    result = run(h, as_of=at(10), persistence="per-service-call", trim_trailing=False)
    assert result.stats["calls_included"] == 0
    assert of_kind(result, "response_missing")[0].call_id == "a"


def test_messages_and_calls_after_as_of_do_not_exist() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "a", 1, (call(3, "a", t=2), call(4, "b", round=1, t=20))),
        user(5, "later", 30),
    )
    result = run(h, as_of=at(10), persistence="per-service-call", trim_trailing=False)
    assert [m["role"] for m in result.payload["messages"]] == ["user", "assistant", "tool"]
    assert [d.kind for d in of_kind(result, "after_as_of")] == ["after_as_of"] * 2
    assert of_kind(result, "after_as_of")[1].message_id == "u5"
    # The run had activity after as_of, so at that moment it was still running: no final text.
    assert of_kind(result, "run_not_completed")


# -- rule 3: ids ------------------------------------------------------------------------------

ID_RE = re.compile(r"call_[0-9a-f]{24}")


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_empty_id_gets_one_stable_generated_id_in_call_and_result(fmt: str) -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "done", 1, (call(3, "", seq=0, t=2), call(4, "", seq=1, t=2))),
    )
    first = run(h, format=fmt)
    second = run(h, format=fmt)
    assert json.dumps(first.payload) == json.dumps(second.payload)
    generated = [d.detail["new_id"] for d in of_kind(first, "id_generated")]
    assert len(generated) == 2 and len(set(generated)) == 2
    assert all(ID_RE.fullmatch(i) for i in generated)
    text = json.dumps(first.payload)
    for new_id in generated:
        assert text.count(f'"{new_id}"') == 2  # once in the call, once in its result


def test_generated_id_depends_on_conversation_not_on_row_ids() -> None:
    def build(conversation: str, row_offset: int) -> str:
        h = history(
            user(1 + row_offset, "q", 0),
            assistant(2, "done", 1, (call(3 + row_offset, "", t=2),)),
            conversation_id=conversation,
        )
        return run(h).payload["messages"][1]["tool_calls"][0]["id"]

    assert build("conv-1", 0) == build("conv-1", 100)
    assert build("conv-1", 0) != build("conv-2", 0)


def test_duplicate_id_is_renamed_consistently_in_call_and_result() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "one", 1, (call(3, "call_1", t=2),)),
        user(4, "again", 10),
        assistant(5, "two", 11, (call(6, "call_1", t=12),)),
    )
    result = run(h)
    (renamed,) = of_kind(result, "id_renamed")
    assert renamed.detail["old_id"] == "call_1" and renamed.message_id == "a5"
    new_id = renamed.detail["new_id"]
    messages = result.payload["messages"]
    assert tool_call_ids(messages) == [["call_1"], [new_id]]
    assert messages[6] == {"role": "tool", "tool_call_id": new_id, "content": "ok"}


def test_ids_invalid_for_the_provider_are_renamed() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "x", 1, (call(3, "tc.01", seq=0, t=2), call(4, "y" * 70, seq=1, t=2))),
    )
    chat = run(h)
    assert [d.detail["old_id"] for d in of_kind(chat, "id_renamed")] == ["y" * 70]
    anthropic = run(h, format="anthropic")
    assert [d.detail["old_id"] for d in of_kind(anthropic, "id_renamed")] == ["tc.01", "y" * 70]


def test_ids_follow_each_formats_length_limit() -> None:
    """Chat Completions refuses tool_calls[].id over 40 characters; Responses and Anthropic take
    up to 64 (issue 12)."""
    ids = ["call_" + "a" * 36, "call_" + "b" * 59]  # 41 and 64 characters
    h = history(
        user(1, "q", 0),
        assistant(2, "x", 1, (call(3, ids[0], seq=0, t=2), call(4, ids[1], seq=1, t=2))),
    )
    chat = run(h)
    assert [d.detail["old_id"] for d in of_kind(chat, "id_renamed")] == ids
    sent = tool_call_ids(chat.payload["messages"])[0]
    assert all(len(i) <= 40 for i in sent) and run(h).payload == chat.payload  # stable
    assert [m["tool_call_id"] for m in chat.payload["messages"][2:4]] == sent
    for fmt in ("openai-responses", "anthropic"):
        assert of_kind(run(h, format=fmt), "id_renamed") == []


# -- tool names ------------------------------------------------------------------------------


def sent_names(payload: dict, fmt: str) -> tuple[list[str], list[str]]:  # type: ignore[type-arg]
    """(names in the calls, names of the tool definitions) as sent."""
    if fmt == "openai-chat":
        calls = [
            c["function"]["name"] for m in payload["messages"] for c in m.get("tool_calls", [])
        ]
        return calls, [t["function"]["name"] for t in payload["tools"]]
    if fmt == "openai-responses":
        calls = [i["name"] for i in payload["input"] if i.get("type") == "function_call"]
    else:
        calls = [
            b["name"]
            for m in payload["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_use"
        ]
    return calls, [t["name"] for t in payload["tools"]]


REFUSED_NAMES_HISTORY = history(
    user(1, "Weather and docs?", 0),
    assistant(
        2,
        "done",
        1,
        (
            call(3, "c1", name="get weather", seq=0, t=2),
            call(4, "c2", name="search.v2", seq=1, t=2),
            call(5, "c3", name="search v2", seq=2, t=2),
            call(6, "c4", name="search_v2", seq=3, t=2),
        ),
    ),
    user(7, "And tomorrow?", 10),
    assistant(8, "same", 11, (call(9, "c5", name="get weather", t=12),)),
    tools=(
        ToolDefinition("get weather", "Weather.", {"type": "object", "properties": {}}),
        ToolDefinition("search.v2", None, None),
        ToolDefinition("search_v2", "Valid already.", None),
    ),
)


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_tool_names_providers_refuse_are_mapped_alike_in_definitions_and_calls(fmt: str) -> None:
    """Issue 12: "get weather" and "search.v2" are refused; each gets one accepted name, the
    same in its definition and in every call, distinct from every other name ("search v2"
    sanitizes to the same "search_v2" that a valid tool already has), with a diagnostic."""
    result = run(REFUSED_NAMES_HISTORY, format=fmt)  # run() checks validate() == []
    calls, tools = sent_names(result.payload, fmt)
    weather, dotted, spaced = calls[0], calls[1], calls[2]
    assert weather == "get_weather" and calls[4] == weather
    assert re.fullmatch(r"search_v2_[0-9a-f]{8}", dotted)
    assert re.fullmatch(r"search_v2_[0-9a-f]{8}", spaced) and spaced != dotted
    assert calls[3] == "search_v2"
    assert tools == sorted([weather, dotted, "search_v2"])
    renamed = of_kind(result, "tool_name_renamed")
    on_calls = [
        (d.call_id, d.detail["old_name"], d.detail["new_name"]) for d in renamed if d.call_id
    ]
    assert on_calls == [
        ("c1", "get weather", weather),
        ("c2", "search.v2", dotted),
        ("c3", "search v2", spaced),
        ("c5", "get weather", weather),
    ]
    on_definitions = {d.detail["old_name"]: d.detail["new_name"] for d in renamed if not d.call_id}
    assert on_definitions == {"get weather": weather, "search.v2": dotted}
    # Stable: the same data gives the same names, whatever the moment replayed.
    earlier = run(REFUSED_NAMES_HISTORY, format=fmt, as_of=at(5))
    assert sent_names(earlier.payload, fmt)[1] == tools
    assert sent_names(earlier.payload, fmt)[0] == calls[:4]


# -- rule 4: freshness ------------------------------------------------------------------------


def test_default_freshness_window_is_five_minutes() -> None:
    assert ReplayOptions().freshness_seconds == 300
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (call(3, "old", seq=0, t=0, rt=0), call(4, "fresh", seq=1, t=0, rt=2)),
        ),
    )
    result = replay(h, ReplayOptions(as_of=at(301)))
    assert tool_call_ids(result.payload["messages"]) == [["fresh"]]
    (stale,) = of_kind(result, "stale")
    assert stale.call_id == "old" and stale.detail["freshness_seconds"] == 300
    assert stale.detail["age_seconds"] == 301


def test_every_call_of_a_round_stale_skips_the_round() -> None:
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "a", t=2),)))
    result = run(h, as_of=at(1000), freshness_seconds=60)
    assert kinds(result) == ["stale", "round_skipped"]
    assert [m["role"] for m in result.payload["messages"]] == ["user", "assistant"]


def test_age_counts_from_call_time_when_response_time_is_unknown() -> None:
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "a", t=2, rt=None),)))
    assert run(h, as_of=at(62), freshness_seconds=60).stats["calls_included"] == 1
    assert run(h, as_of=at(63), freshness_seconds=60).stats["calls_included"] == 0


# -- rule 5: persistence and trailing results -------------------------------------------------


def failed_run_history(status: str = "failed"):  # type: ignore[no-untyped-def]
    return history(
        user(1, "q", 0),
        assistant(
            2,
            "partial answer",
            1,
            (
                call(3, "r0", round=0, t=2),
                call(4, "r1", round=1, t=4),
                call(5, "r2", round=2, t=6, response=None),
            ),
            status=status,
        ),
        user(6, "retry", 10),
    )


@pytest.mark.parametrize("status", ["failed", "cancelled", "in_progress"])
def test_per_run_replays_nothing_of_an_unfinished_run(status: str) -> None:
    result = run(failed_run_history(status))
    assert [m["content"] for m in result.payload["messages"]] == ["q", "retry"]
    (diag,) = of_kind(result, "run_not_completed")
    assert diag.message_id == "a2" and diag.detail["status"] == status
    assert result.stats["calls_omitted"] == {"run_not_completed": 3}


def as_of_inside_run(status: str):  # type: ignore[no-untyped-def]
    """Issue 12's case: the run's answer and its compaction only exist after 00:00:11."""
    return history(
        user(1, "Find it", 0),
        assistant(
            2,
            "Found it [source1].",
            1,
            (
                call(3, "c1", round=0, t=2, response=sources(1, 2), rt=3),
                call(4, "c2", round=1, t=10, response="more", rt=11),
            ),
            status=status,
        ),
    )


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "in_progress"])
def test_as_of_inside_a_run_replays_it_in_progress_whatever_it_ended_as(status: str) -> None:
    h = as_of_inside_run(status)
    result = run(h, as_of=at(5), persistence="per-service-call", trim_trailing=False)
    messages = result.payload["messages"]
    # No answer yet, so nothing compacted against it: c1's result is the stored text.
    assert [m.get("content") for m in messages] == ["Find it", None, sources(1, 2)]
    assert of_kind(result, "compacted") == []
    (diag,) = of_kind(result, "run_not_completed")
    assert diag.detail["status"] == "in_progress"
    per_run = run(h, as_of=at(5))
    assert [m["content"] for m in per_run.payload["messages"]] == ["Find it"]
    assert "still in progress" in of_kind(per_run, "run_not_completed")[0].reason
    # Once everything is stored, the run is what it ended as.
    done = run(h, persistence="per-service-call", trim_trailing=False)
    assert done.payload["messages"][-1]["content"] == "Found it [source1]."


def test_per_service_call_replays_the_finished_rounds_of_a_failed_run() -> None:
    result = run(failed_run_history(), persistence="per-service-call")
    messages = result.payload["messages"]
    assert tool_call_ids(messages) == [["r0"], ["r1"]]
    assert messages[-2] == {"role": "assistant", "content": "partial answer"}
    assert of_kind(result, "round_skipped")[0].round_index == 2


def test_trailing_round_of_a_terminated_run_is_trimmed() -> None:
    # A completed run whose tool loop was terminated: the last results never reached the model.
    h = history(
        user(1, "q", 0),
        assistant(2, None, 1, (call(3, "r0", round=0, t=2), call(4, "r1", round=1, t=4))),
        user(5, "next", 10),
    )
    trimmed = run(h)
    assert tool_call_ids(trimmed.payload["messages"]) == [["r0"]]
    (diag,) = of_kind(trimmed, "trailing_trimmed")
    assert diag.round_index == 1 and diag.detail["calls"] == ["r1"]
    kept = run(h, trim_trailing=False)
    assert tool_call_ids(kept.payload["messages"]) == [["r0"], ["r1"]]


def test_results_consumed_by_a_later_service_call_are_not_trailing() -> None:
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            None,
            1,
            (call(3, "r0", t=2),),
            services=(ServiceCall(0, "m", created_at=at(1)), ServiceCall(1, "m", created_at=at(4))),
        ),
    )
    assert not of_kind(run(h), "trailing_trimmed")


def test_per_service_call_trims_the_unconsumed_round_of_a_failed_run() -> None:
    h = history(
        user(1, "q", 0),
        assistant(
            2, None, 1, (call(3, "r0", round=0, t=2), call(4, "r1", round=1, t=4)), status="failed"
        ),
    )
    result = run(h, persistence="per-service-call")
    assert tool_call_ids(result.payload["messages"]) == [["r0"]]
    assert of_kind(result, "trailing_trimmed")[0].round_index == 1


# -- rule 6: compaction -----------------------------------------------------------------------


def test_uncited_sources_are_dropped_case_insensitively_without_renumbering() -> None:
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "Revenue grew [Source2], margins too [source4].",
            1,
            (call(3, "s", t=2, response=sources(1, 2, 3, 4)),),
        ),
        user(4, "and [source1]?", 10),
    )
    result = run(h)
    content = result.payload["messages"][2]["content"]
    assert content == '[{"source_number":2,"title":"Doc 2"},{"source_number":4,"title":"Doc 4"}]'
    (diag,) = of_kind(result, "compacted")
    assert diag.detail == {"kept": [2, 4], "dropped": [1, 3]}
    assert result.next_source_number == 5


def test_citations_only_count_in_the_same_turns_final_text() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "nothing cited", 1, (call(3, "s", t=2, response=sources(7)),)),
        user(4, "q2", 10),
        assistant(5, "see [source7]", 11),
    )
    assert run(h).payload["messages"][2]["content"] == "[]"


def test_next_source_number_counts_results_not_replayed_and_is_zero_without_sources() -> None:
    stale = history(
        user(1, "q", 0), assistant(2, "x [source9]", 1, (call(3, "s", t=2, response=sources(9)),))
    )
    assert run(stale, as_of=at(10_000), freshness_seconds=60).next_source_number == 10
    plain = history(user(1, "q", 0), assistant(2, "x", 1, (call(3, "s", t=2),)))
    assert run(plain).next_source_number == 0


def test_compaction_off_or_without_final_text_keeps_the_stored_result() -> None:
    stored = sources(1, 2)
    with_text = history(
        user(1, "q", 0), assistant(2, "[source1]", 1, (call(3, "s", t=2, response=stored),))
    )
    assert run(with_text, compact_sources=False).payload["messages"][2]["content"] == stored
    no_text = history(user(1, "q", 0), assistant(2, None, 1, (call(3, "s", t=2, response=stored),)))
    assert run(no_text, trim_trailing=False).payload["messages"][2]["content"] == stored


def test_non_source_json_lists_are_left_alone() -> None:
    odd = json.dumps([{"source_number": 1}, {"title": "no number"}])
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "s", t=2, response=odd),)))
    result = run(h)
    assert result.payload["messages"][2]["content"] == odd
    assert result.next_source_number == 0


# -- rule 7: truncation -----------------------------------------------------------------------


def test_result_over_the_cap_is_cut_with_a_notice_of_how_much() -> None:
    big = "a" * 100  # 25 heuristic tokens
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "s", t=2, response=big),)))
    result = run(h, result_token_cap=10)
    assert result.payload["messages"][2]["content"] == "a" * 40 + "\n[... truncated 15 tokens ...]"
    (diag,) = of_kind(result, "truncated")
    assert diag.detail == {"cut_tokens": 15, "cap": 10}
    assert run(h, result_token_cap=25).payload["messages"][2]["content"] == big


def test_truncation_uses_the_injected_token_counter() -> None:
    def words(text: str) -> int:
        return len(text.split())

    text = " ".join(f"w{i}" for i in range(50))
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "s", t=2, response=text),)))
    result = run(h, result_token_cap=10, count_tokens=words)
    content = result.payload["messages"][2]["content"]
    kept, notice = content.split("\n")
    assert words(kept) <= 10 and kept.startswith("w0 w1")
    assert notice == "[... truncated 40 tokens ...]"


def word_pairs(text: str) -> int:
    """A tokenizer whose counts grow by two at a time: two tokens per word."""
    return 2 * len(text.split())


def test_the_notice_says_how_many_tokens_were_over_the_cap_as_agents_truncators_do() -> None:
    """A ``ToolResultTruncator`` writes ``tokens - maxTokens``. Here the longest prefix that
    fits the cap stops a token short of it (the next word would be two more), so one more token
    is cut than the result was over: the notice follows the truncator, the diagnostic and the
    stats count what was cut."""
    text = "abcdefghij klmnopqrst uvwxyz"  # six tokens
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "s", t=2, response=text),)))
    result = run(h, result_token_cap=3, count_tokens=word_pairs)
    assert result.payload["messages"][2]["content"] == "abcdefghij \n[... truncated 3 tokens ...]"
    (diag,) = of_kind(result, "truncated")
    assert diag.detail == {"cut_tokens": 4, "cap": 3}
    assert "3 tokens over the 3-token cap" in diag.reason
    assert result.stats["truncated_tokens"] == 4


def test_a_result_with_more_than_four_characters_per_token_keeps_the_cap() -> None:
    """Issue 23: a 20,000-character result with ``result_token_cap=100`` kept 400 characters
    (50 tokens): the prefix was guessed as four characters a token and never grown."""
    text = " ".join(f"w{i:07d}" for i in range(2_500))[:20_000]  # nine characters a word

    def words(t: str) -> int:
        return len(t.split())

    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "s", t=2, response=text),)))
    result = run(h, result_token_cap=100, count_tokens=words)
    kept, _, notice = result.payload["messages"][2]["content"].partition("\n")
    assert words(kept) == 100 and len(kept) >= 899
    over = words(text) - 100  # 2,123
    assert notice == f"[... truncated {over} tokens ...]"
    assert of_kind(result, "truncated")[0].detail == {"cut_tokens": over, "cap": 100}


def test_a_result_already_cut_to_the_cap_is_not_cut_again() -> None:
    """A copy imported from a truncated export, or an agent running such a truncator: the
    text before the notice fits the cap, so the result is sent as it is."""
    cut = "a" * 40 + "\n[... truncated 15 tokens ...]"
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "s", t=2, response=cut),)))
    result = run(h, result_token_cap=10)
    assert result.payload["messages"][2]["content"] == cut
    assert of_kind(result, "truncated") == []
    # A notice with more before it than the cap allows is cut like any other text.
    again = run(h, result_token_cap=5)
    assert again.payload["messages"][2]["content"].startswith("a" * 20 + "\n[... truncated")


def test_heuristic_tokens() -> None:
    assert [heuristic_tokens(s) for s in ["", "a", "abcd", "abcde"]] == [0, 1, 1, 2]


# -- rule 8: budget ---------------------------------------------------------------------------


def long_history():  # type: ignore[no-untyped-def]
    """Three turns; every unit costs well over 10 tokens."""
    return history(
        user(1, "u1 " + "x" * 60, 0),
        assistant(2, "t1 " + "y" * 60, 1, (call(3, "c1", t=2, response="r" * 60),)),
        user(4, "u2 " + "x" * 60, 10),
        assistant(5, "t2 " + "y" * 60, 11, (call(6, "c2", t=12, response="r" * 60),)),
        user(7, "u3 " + "x" * 60, 20),
    )


def test_fifo_drops_the_oldest_units_and_never_splits_a_call_from_its_result() -> None:
    full = run(long_history())
    budget = full.stats["estimated_tokens"] - 30
    result = run(long_history(), context_budget=budget)
    pruned = of_kind(result, "pruned")
    assert [(d.message_id, d.detail["unit"]) for d in pruned] == [("u1", "user"), ("a2", "round")]
    assert result.stats["estimated_tokens"] <= budget and not result.stats["over_budget"]
    messages = result.payload["messages"]
    assert messages[0]["content"].startswith("t1")
    assert "c1" not in json.dumps(messages)  # call and result went together


def test_fifo_never_drops_the_latest_user_message() -> None:
    h = history(
        user(1, "only question", 0),
        assistant(2, None, 1, (call(3, "c1", round=0, t=2), call(4, "c2", round=1, t=4))),
        assistant(5, "answer " + "z" * 100, 6, services=(ServiceCall(2, "m"),)),
    )
    result = run(h, context_budget=1, trim_trailing=False)
    assert result.payload["messages"] == [{"role": "user", "content": "only question"}]
    assert result.stats["over_budget"] is True
    assert of_kind(result, "over_budget")[0].detail["budget"] == 1


def test_turns_mode_drops_whole_oldest_turns_but_never_the_latest() -> None:
    full = run(long_history())
    result = run(long_history(), context_budget=full.stats["estimated_tokens"] - 30, prune="turns")
    assert {d.detail["turn"] for d in of_kind(result, "pruned")} == {1}
    assert [m["content"][:2] for m in result.payload["messages"] if m["role"] == "user"] == [
        "u2",
        "u3",
    ]
    everything = run(long_history(), context_budget=0, prune="turns")
    assert everything.payload["messages"] == [{"role": "user", "content": "u3 " + "x" * 60}]
    assert everything.stats["over_budget"] is True


def test_system_prompt_and_tools_are_a_fixed_cost() -> None:
    h = history(user(1, "hello", 0), system="S" * 400, tools=(SEARCH_TOOL,))
    result = run(h, context_budget=10)
    assert result.stats["fixed_tokens"] >= 100
    assert result.payload["messages"][0] == {"role": "system", "content": "S" * 400}
    assert result.stats["over_budget"] is True


def test_anthropic_still_starts_with_a_user_message_after_pruning() -> None:
    full = run(long_history(), format="anthropic")
    result = run(
        long_history(), format="anthropic", context_budget=full.stats["estimated_tokens"] - 10
    )
    assert result.payload["messages"][0]["role"] == "user"
    assert of_kind(result, "pruned")[0].message_id == "u1"
    assert of_kind(result, "leading_assistant_dropped")


# -- rule 9: formats --------------------------------------------------------------------------


def format_history():  # type: ignore[no-untyped-def]
    return history(
        user(1, "Onboard TechCorp", 0),
        assistant(
            2,
            "Done.",
            1,
            (
                call(3, "tc_01", name="search", args={"name": "TechCorp"}, seq=0, t=2),
                call(
                    4, "tc_02", name="search", args=None, seq=1, t=2, response="boom", is_error=True
                ),
            ),
        ),
        system=" You are helpful.",
        tools=(SEARCH_TOOL, ToolDefinition("lookup", None, None)),
    )


def test_openai_chat_shape() -> None:
    payload = run(format_history()).payload
    assert payload == {
        "messages": [
            {"role": "system", "content": " You are helpful."},
            {"role": "user", "content": "Onboard TechCorp"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "tc_01",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"name":"TechCorp"}'},
                    },
                    {
                        "id": "tc_02",
                        "type": "function",
                        "function": {"name": "search", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "tc_01", "content": "ok"},
            {"role": "tool", "tool_call_id": "tc_02", "content": "boom"},
            {"role": "assistant", "content": "Done."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "Search the docs.",
                    "parameters": SEARCH_TOOL.parameters,
                },
            },
            {"type": "function", "function": {"name": "lookup"}},
        ],
    }


def test_openai_responses_shape() -> None:
    payload = run(format_history(), format="openai-responses").payload
    assert payload == {
        "instructions": " You are helpful.",
        "input": [
            {"role": "user", "content": "Onboard TechCorp"},
            {
                "type": "function_call",
                "call_id": "tc_01",
                "name": "search",
                "arguments": '{"name":"TechCorp"}',
            },
            {"type": "function_call", "call_id": "tc_02", "name": "search", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "tc_01", "output": "ok"},
            {"type": "function_call_output", "call_id": "tc_02", "output": "boom"},
            {"role": "assistant", "content": "Done."},
        ],
        "tools": [
            {
                "type": "function",
                "name": "search",
                "description": "Search the docs.",
                "parameters": SEARCH_TOOL.parameters,
                "strict": False,
            },
            {
                "type": "function",
                "name": "lookup",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            },
        ],
    }


def test_anthropic_shape_with_results_in_the_next_user_message() -> None:
    payload = run(format_history(), format="anthropic").payload
    assert payload == {
        "system": " You are helpful.",
        "messages": [
            {"role": "user", "content": "Onboard TechCorp"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "tc_01",
                        "name": "search",
                        "input": {"name": "TechCorp"},
                    },
                    {"type": "tool_use", "id": "tc_02", "name": "search", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tc_01", "content": "ok"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "tc_02",
                        "content": "boom",
                        "is_error": True,
                    },
                ],
            },
            {"role": "assistant", "content": "Done."},
        ],
        "tools": [
            {
                "name": "search",
                "description": "Search the docs.",
                "input_schema": SEARCH_TOOL.parameters,
            },
            {"name": "lookup", "input_schema": {"type": "object", "properties": {}}},
        ],
    }


def test_anthropic_merges_same_role_messages_and_moves_system_messages() -> None:
    h = history(
        user(1, "first", 0),
        user(2, "second", 1),
        system_msg(3, "Be brief.", 2),
        assistant(4, None, 3, (call(5, "c1", t=4),), services=(ServiceCall(1, "m"),)),
        user(6, "third", 10),
    )
    result = run(h, format="anthropic")
    assert result.payload["system"] == "Be brief."
    assert result.payload["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "search", "input": {"q": "c1"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
                {"type": "text", "text": "third"},
            ],
        },
    ]
    assert kinds(result).count("message_merged") == 2
    assert "system_moved" in kinds(result)


def test_keys_without_content_are_omitted() -> None:
    h = history(user(1, "hi", 0))
    assert run(h).payload == {"messages": [{"role": "user", "content": "hi"}]}
    assert run(h, format="openai-responses").payload == {
        "input": [{"role": "user", "content": "hi"}]
    }
    assert run(h, format="anthropic").payload == {"messages": [{"role": "user", "content": "hi"}]}


def test_empty_user_messages_are_skipped_and_anthropic_drops_leading_assistant_text() -> None:
    h = history(assistant(1, "Hi, how can I help?", 0), user(2, "", 1), user(3, "help", 2))
    chat = run(h)
    assert [m["role"] for m in chat.payload["messages"]] == ["assistant", "user"]
    assert "empty_message_skipped" in kinds(chat)
    anthropic = run(h, format="anthropic")
    assert anthropic.payload["messages"] == [{"role": "user", "content": "help"}]
    assert "leading_assistant_dropped" in kinds(anthropic)


def test_duplicate_tool_definitions_are_sent_once() -> None:
    h = history(user(1, "hi", 0), tools=(SEARCH_TOOL, SEARCH_TOOL))
    result = run(h)
    assert len(result.payload["tools"]) == 1
    assert kinds(result) == ["tool_definition_duplicate"]


# -- result object ----------------------------------------------------------------------------


def test_same_input_gives_byte_identical_output_and_json_exports() -> None:
    h = failed_run_history()
    options = ReplayOptions(
        persistence="per-service-call", freshness_seconds=None, result_token_cap=1
    )
    first, second = replay(h, options), replay(h, options)
    assert json.dumps(first.payload, sort_keys=False) == json.dumps(second.payload, sort_keys=False)
    assert first.diagnostics == second.diagnostics
    exported = json.loads(json.dumps(first.to_dict()))
    assert exported["stats"]["calls_included"] == 2
    assert exported["diagnostics"][0]["kind"] == first.diagnostics[0].kind
    assert set(exported) == {"payload", "diagnostics", "stats", "next_source_number"}


def test_diagnostics_come_in_conversation_order() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "x", 1, (call(3, "", t=2), call(4, "m", round=1, t=3, response=None))),
        user(5, "", 10),
        assistant(6, "y", 11, (call(7, "", t=12, response=sources(1)),)),
    )
    result = run(h)
    assert [(d.kind, d.message_id) for d in result.diagnostics] == [
        ("id_generated", "a2"),
        ("response_missing", "a2"),
        ("round_skipped", "a2"),
        ("empty_message_skipped", "u5"),
        ("id_generated", "a6"),
        ("compacted", "a6"),
    ]


def test_stats_count_calls_by_reason() -> None:
    result = run(failed_run_history(), persistence="per-service-call", context_budget=0)
    stats = result.stats
    assert stats["calls_total"] == 3
    assert stats["calls_included"] == 0
    assert stats["calls_omitted"] == {"pruned": 2, "response_missing": 1}
    assert stats["budget"] == 0 and stats["over_budget"] is True
    assert stats["messages"] == len(result.payload["messages"])


def test_turn_starts_list_each_user_message() -> None:
    starts = turn_starts(long_history())
    assert [(s.index, s.message_id, s.created_at) for s in starts] == [
        (0, "u1", at(0)),
        (1, "u4", at(10)),
        (2, "u7", at(20)),
    ]
    # Replaying "as of turn 2 start" shows what the model saw when answering turn 2.
    result = run(long_history(), as_of=starts[1].created_at)
    assert result.payload["messages"][-1]["content"].startswith("u2")


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="format"):
        ReplayOptions(format="gemini")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timezone"):
        ReplayOptions(as_of=at(0).replace(tzinfo=None))
    with pytest.raises(ValueError, match="budget"):
        ReplayOptions(context_budget=-1)


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_untyped_tool_schemas_are_sent_as_object_schemas(fmt: str) -> None:
    """Agents often store `{}` or bare properties; providers reject a schema without
    "type": "object", so the replay sends one (and the payload validates)."""
    h = history(
        user(1, "hi", 0),
        tools=(
            ToolDefinition("empty", None, {}),
            ToolDefinition("bare", None, {"properties": {"q": {"type": "string"}}}),
        ),
    )
    result = run(h, format=fmt)
    tools = result.payload["tools"]
    key = {"openai-chat": "parameters", "openai-responses": "parameters"}.get(fmt, "input_schema")
    schemas = [t["function"][key] if fmt == "openai-chat" else t[key] for t in tools]
    assert schemas == [
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"q": {"type": "string"}}},
    ]
    assert validate(result.payload, fmt) == []
