"""Edits before a run (webapp/replay/edits.py): read strictly (the API's 422 names the edit and
the field), applied without touching the stored history, and the edited history still replays
into a payload every provider accepts, in all three formats, whatever the options.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webapp.replay import FORMATS, History, ReplayOptions, replay, validate
from webapp.replay.build import latest_moment, sorted_messages
from webapp.replay.edits import (
    EDIT_TYPES,
    MAX_EDITS,
    Edit,
    EditError,
    apply_edits,
    parse_edits,
)
from webapp.replay.export import resolve_as_of, turn_times
from webapp.replay.formats import payload_messages
from webapp.replay.ids import derive_id

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import (
        assistant,
        at,
        call,
        event_times,
        histories,
        history,
        options,
        user,
    )
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import (
        assistant,
        at,
        call,
        event_times,
        histories,
        history,
        options,
        user,
    )

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- reading edits ---------------------------------------------------------------------------

edit_values = st.one_of(
    st.builds(
        Edit, st.just("replace_result"), st.text(min_size=1, max_size=8), st.text(max_size=8)
    ),
    st.builds(
        lambda call_id, message: Edit("fail_call", call_id, message=message),
        st.text(min_size=1, max_size=8),
        st.text(max_size=8),
    ),
    st.builds(lambda call_id: Edit("drop_call", call_id), st.text(min_size=1, max_size=8)),
    st.builds(
        lambda content: Edit("append_user_message", content=content),
        st.text(min_size=1, max_size=8).filter(str.strip),
    ),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(edit_values, max_size=6))
def test_edits_come_back_from_their_json(edits: list[Edit]) -> None:
    raw = json.loads(json.dumps([e.to_json() for e in edits]))
    assert parse_edits(raw) == edits
    for item, edit in zip(raw, edits, strict=True):
        assert set(item) == {
            "type",
            *(k for k in ("call_id", "content", "message") if getattr(edit, k) is not None),
        }


def test_no_edits() -> None:
    assert parse_edits(None) == []
    assert parse_edits([]) == []


@pytest.mark.parametrize(
    ("raw", "index", "field", "says"),
    [
        ({"type": "drop_call"}, None, None, "must be a list"),
        ("drop everything", None, None, "must be a list"),
        (["drop_call"], 0, None, "must be an object"),
        ([{"call_id": "c1"}], 0, "type", "is missing"),
        ([{"type": "rename_call", "call_id": "c1"}], 0, "type", "must be one of"),
        ([{"type": None}], 0, "type", "must be one of"),
        ([{"type": "drop_call"}], 0, "call_id", "is missing"),
        ([{"type": "replace_result", "call_id": "c1"}], 0, "content", "is missing"),
        ([{"type": "fail_call", "call_id": "c1", "content": "x"}], 0, "content", "not a field"),
        (
            [{"type": "drop_call", "call_id": "c1"}, {"type": "drop_call", "call_id": 7}],
            1,
            "call_id",
            "must be a string, not a number",
        ),
        ([{"type": "drop_call", "call_id": ""}], 0, "call_id", "must not be empty"),
        ([{"type": "replace_result", "call_id": "c", "content": None}], 0, "content", "not null"),
        ([{"type": "append_user_message", "content": " \n"}], 0, "content", "some text"),
        ([{"type": "append_user_message", "content": ["hi"]}], 0, "content", "not a list"),
        ([{"type": "drop_call", "call_id": "c"}] * (MAX_EDITS + 1), None, None, "at most"),
    ],
)
def test_a_wrong_edit_is_named_by_its_place_and_field(
    raw: Any, index: int | None, field: str | None, says: str
) -> None:
    with pytest.raises(EditError) as caught:
        parse_edits(raw)
    error = caught.value
    assert (error.index, error.field) == (index, field)
    assert says in str(error)
    where = (
        "edits" + ("" if index is None else f"[{index}]") + ("" if field is None else f".{field}")
    )
    assert str(error).startswith(where + ": ")


def test_an_empty_result_is_a_result() -> None:
    (edit,) = parse_edits([{"type": "replace_result", "call_id": "c1", "content": ""}])
    assert edit == Edit("replace_result", "c1", "")


# -- applying them: examples ---------------------------------------------------------------------


def order_history() -> History:
    return history(
        user(1, "Where is order 42?", 0),
        assistant(
            2,
            "It ships tomorrow.",
            1,
            (
                call(3, "c1", name="lookup_order", t=2, response='{"status": "packed"}'),
                call(4, "c2", name="search", seq=1, t=2),
                call(5, "c3", name="track", round=1, t=5),
            ),
        ),
        user(6, "Thanks!", 10),
        assistant(7, "You're welcome.", 11),
    )


def payload_of(h: History, fmt: str, as_of: datetime | None = None) -> dict[str, Any]:
    result = replay(h, ReplayOptions(as_of=as_of, format=fmt, freshness_seconds=None))
    assert validate(result.payload, fmt) == []
    return result.payload


def results_by_id(payload: dict[str, Any], fmt: str) -> dict[str, dict[str, Any]]:
    """Every result in the payload, by call id: {"content": text or None, "is_error": bool}."""
    out: dict[str, dict[str, Any]] = {}
    for m in payload_messages(payload, fmt):
        if fmt == "openai-chat" and m.get("role") == "tool":
            out[m["tool_call_id"]] = {"content": m["content"], "is_error": False}
        elif fmt == "openai-responses" and m.get("type") == "function_call_output":
            out[m["call_id"]] = {"content": m["output"], "is_error": False}
        elif fmt == "anthropic" and isinstance(m.get("content"), list):
            for block in m["content"]:
                if block.get("type") == "tool_result":
                    out[block["tool_use_id"]] = {
                        "content": block.get("content", ""),
                        "is_error": block.get("is_error", False),
                    }
    return out


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_edit_does_what_it_says_in_every_format(fmt: str) -> None:
    h = order_history()
    before = copy.deepcopy(h)
    edits = parse_edits(
        [
            {"type": "replace_result", "call_id": "c1", "content": '{"status": "lost"}'},
            {"type": "fail_call", "call_id": "c2", "message": "search is down"},
            {"type": "drop_call", "call_id": "c3"},
            {"type": "append_user_message", "content": "Are you sure?"},
        ]
    )
    edited = apply_edits(h, edits)
    assert h == before  # the stored history is never changed
    payload = payload_of(edited, fmt)
    results = results_by_id(payload, fmt)
    assert results["c1"] == {"content": '{"status": "lost"}', "is_error": False}
    # A failed call is sent as the replay sends every stored error: Anthropic marks it.
    assert results["c2"] == {"content": "search is down", "is_error": fmt == "anthropic"}
    assert "c3" not in results and "c3" not in json.dumps(payload)
    last = payload_messages(payload, fmt)[-1]
    assert last["role"] == "user"
    text = last["content"] if isinstance(last["content"], str) else last["content"][-1]["text"]
    assert text == "Are you sure?"


def test_replacing_a_failed_result_clears_the_error() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "a", 1, (call(3, "c1", t=1, response="boom", is_error=True),)),
    )
    fixed = apply_edits(h, [Edit("replace_result", "c1", "fine")])
    (c,) = fixed.messages[1].tool_calls
    assert (c.response, c.is_error) == ("fine", False)
    # The result keeps its time: the policy (freshness, trimming) decides about it as before.
    assert c.response_created_at == h.messages[1].tool_calls[0].response_created_at
    assert results_by_id(payload_of(fixed, "anthropic"), "anthropic")["c1"]["is_error"] is False


def test_a_call_without_a_result_gets_one_as_old_as_the_call() -> None:
    h = history(
        user(1, "q", 0),
        assistant(2, "a", 1, (call(3, "c1", t=1, response=None),)),
    )
    assert results_by_id(payload_of(h, "openai-chat"), "openai-chat") == {}
    fixed = apply_edits(h, [Edit("replace_result", "c1", "found it")])
    assert fixed.messages[1].tool_calls[0].response_created_at is None
    assert results_by_id(payload_of(fixed, "openai-chat"), "openai-chat")["c1"]["content"] == (
        "found it"
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_dropping_the_only_call_of_every_round_leaves_a_valid_replay(fmt: str) -> None:
    h = order_history()
    edited = apply_edits(h, [Edit("drop_call", cid) for cid in ("c1", "c2", "c3")])
    assert edited.messages[1].tool_calls == ()
    payload = payload_of(edited, fmt)
    assert results_by_id(payload, fmt) == {}
    # Only a message without text nor calls is skipped; this one still has its answer.
    assert "It ships tomorrow." in json.dumps(payload)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_appended_message_is_the_last_thing_a_replay_at_a_turn_holds(fmt: str) -> None:
    h = order_history()
    as_of = resolve_as_of("turn:1", now=at(1000), turn_times=turn_times(h))
    edited = apply_edits(
        h,
        [Edit("append_user_message", content="One"), Edit("append_user_message", content="Two")],
        as_of=as_of,
    )
    # turn:1 still names the same moment; the new messages sort right after it.
    assert resolve_as_of("turn:1", now=at(1000), turn_times=turn_times(edited)) == as_of
    texts = [
        m.content for m in sorted_messages(edited) if m.created_at <= as_of and m.role == "user"
    ]
    assert texts == ["Where is order 42?", "One", "Two"]
    payload = payload_of(edited, fmt, as_of)
    dumped = json.dumps(payload)
    assert dumped.index("Where is order 42?") < dumped.index('"One"') < dumped.index('"Two"')
    assert "Thanks!" not in dumped and "It ships" not in dumped


def test_without_a_cut_an_appended_message_keeps_the_latest_moment() -> None:
    h = order_history()
    edited = apply_edits(h, [Edit("append_user_message", content="More?")])
    assert latest_moment(sorted_messages(edited)) == latest_moment(sorted_messages(h))
    assert sorted_messages(edited)[-1].content == "More?"
    assert payload_of(edited, "openai-chat")["messages"][-1] == {"role": "user", "content": "More?"}


def test_an_empty_conversation_can_be_given_a_question() -> None:
    edited = apply_edits(history(), [Edit("append_user_message", content="Hello?")])
    assert payload_of(edited, "anthropic")["messages"] == [{"role": "user", "content": "Hello?"}]


def test_a_call_that_is_not_there_is_an_error() -> None:
    with pytest.raises(EditError) as caught:
        apply_edits(
            order_history(), [Edit("drop_call", "c1"), Edit("fail_call", "nope", message="x")]
        )
    assert (caught.value.index, caught.value.field) == (1, "call_id")
    assert "no call 'nope'" in str(caught.value)


def test_an_edit_after_a_drop_of_the_same_call_is_an_error() -> None:
    with pytest.raises(
        EditError, match=r"edits\[1\]\.call_id: call 'c1' was dropped by edits\[0\]"
    ):
        apply_edits(order_history(), [Edit("drop_call", "c1"), Edit("replace_result", "c1", "x")])


def test_a_later_edit_of_the_same_call_wins() -> None:
    edited = apply_edits(
        order_history(),
        [Edit("fail_call", "c1", message="down"), Edit("replace_result", "c1", "back up")],
    )
    c = edited.messages[1].tool_calls[0]
    assert (c.response, c.is_error) == ("back up", False)


def test_a_call_after_the_cut_cannot_be_edited() -> None:
    h = order_history()
    # At 3 s: c1 and c2 have their results (at 3 s), c3 (made at 5 s) does not exist yet.
    apply_edits(h, [Edit("replace_result", "c1", "x")], as_of=at(3))
    with pytest.raises(EditError, match="made after the replay's as-of time"):
        apply_edits(h, [Edit("replace_result", "c3", "x")], as_of=at(3))
    # At 2.5 s c1 was made, but its result was not back: editing it would end the run early.
    with pytest.raises(EditError, match="arrived after the replay's as-of time"):
        apply_edits(h, [Edit("drop_call", "c1")], as_of=at(2.5))
    with pytest.raises(EditError, match="made after"):
        apply_edits(h, [Edit("drop_call", "c1")], as_of=at(0))


def test_calls_that_share_an_id_are_named_by_the_ids_the_replay_derives() -> None:
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "Found both.",  # an answer, so the last round is not trailing
            1,
            (call(3, "dup", t=1), call(4, "dup", seq=1, t=1), call(5, "", round=1, t=3)),
        ),
        assistant(6, "done", 6, (call(7, "tc.01", t=6),)),
    )
    with pytest.raises(EditError) as caught:
        apply_edits(h, [Edit("drop_call", "dup")])
    second = derive_id("conv-1", "a2", 0, 1, "dup")
    assert "2 calls share the id 'dup'" in str(caught.value)
    assert second in str(caught.value)
    # The replay shows the second "dup" by that id; an edit by it reaches that call.
    payload = payload_of(h, "openai-chat")
    assert second in results_by_id(payload, "openai-chat")
    edited = apply_edits(h, [Edit("replace_result", second, "second one")])
    assert results_by_id(payload_of(edited, "openai-chat"), "openai-chat")[second]["content"] == (
        "second one"
    )
    # An empty id is generated; Anthropic renames an id it refuses: both name their call.
    generated = derive_id("conv-1", "a2", 1, 0)
    renamed = derive_id("conv-1", "a6", 0, 0, "tc.01")
    anthropic = results_by_id(payload_of(h, "anthropic"), "anthropic")
    assert generated in anthropic and renamed in anthropic
    edited = apply_edits(h, [Edit("fail_call", generated, message="x"), Edit("drop_call", renamed)])
    after = results_by_id(payload_of(edited, "anthropic"), "anthropic")
    assert after[generated] == {"content": "x", "is_error": True}
    assert renamed not in after


# -- applying them: properties ---------------------------------------------------------------


def editable_ids(h: History, as_of: datetime | None) -> list[str]:
    """An id naming each call an edit may touch at ``as_of`` (its own when no other call has
    it, else the derived one), in conversation order."""
    counts = Counter(c.external_id for m in h.messages for c in m.tool_calls)
    out = []
    for m in h.messages:
        for c in m.tool_calls:
            if as_of is not None:
                rc = c.response_created_at
                if m.created_at > as_of or c.created_at > as_of:
                    continue
                if c.response is not None and rc is not None and rc > as_of:
                    continue
            if c.external_id and counts[c.external_id] == 1:
                out.append(c.external_id)
            else:
                parts = (h.conversation_id, m.external_id, c.round_index, c.sequence_index)
                out.append(derive_id(*parts, *((c.external_id,) if c.external_id else ())))
    return out


@st.composite
def edited(draw: st.DrawFn) -> tuple[History, ReplayOptions, list[Edit]]:
    h = draw(histories())
    o = draw(options())
    # A cut at a moment something happened, or none, more often than the options' random time.
    moments = event_times(h)
    cuts = st.sampled_from([o.as_of, None, *moments[-3:]])
    o = replace(o, as_of=draw(cuts))
    ids = editable_ids(h, o.as_of)
    chosen = (
        draw(st.lists(st.sampled_from(ids), min_size=1, unique=True, max_size=4)) if ids else []
    )
    edits = []
    for call_id in chosen:
        kind = draw(st.sampled_from(["replace_result", "fail_call", "drop_call"]))
        text = draw(st.sampled_from(["", "changed", "E" * 500, '[{"source_number": 1}]']))
        if kind == "replace_result":
            edits.append(Edit(kind, call_id, content=text))
        elif kind == "fail_call":
            edits.append(Edit(kind, call_id, message=text))
        else:
            edits.append(Edit(kind, call_id))
    for _ in range(draw(st.integers(0, 2))):
        edits.append(Edit("append_user_message", content=draw(st.sampled_from(["why?", "é ok"]))))
    return h, o, draw(st.permutations(edits))


@SETTINGS
@given(edited())
def test_an_edited_history_replays_into_a_payload_every_provider_accepts(
    case: tuple[History, ReplayOptions, list[Edit]],
) -> None:
    h, o, edits = case
    before = copy.deepcopy(h)
    result = apply_edits(h, edits, as_of=o.as_of)
    assert h == before  # never mutated, nested argument objects included
    for fmt in FORMATS:
        out = replay(result, replace(o, format=fmt))
        problems = validate(out.payload, fmt)
        assert [p for p in problems if p.code != "empty_payload"] == [], (problems, out.payload)
        appended = [e.content for e in edits if e.type == "append_user_message"]
        if appended and o.context_budget is None:
            last = payload_messages(out.payload, fmt)[-1]
            text = (
                last["content"] if isinstance(last["content"], str) else last["content"][-1]["text"]
            )
            assert last["role"] == "user" and text == appended[-1]


@SETTINGS
@given(edited())
def test_edits_change_only_the_calls_they_name(
    case: tuple[History, ReplayOptions, list[Edit]],
) -> None:
    h, o, edits = case
    result = apply_edits(h, edits, as_of=o.as_of)
    appended = sum(e.type == "append_user_message" for e in edits)
    dropped = sum(e.type == "drop_call" for e in edits)
    assert len(result.messages) == len(h.messages) + appended
    assert sum(len(m.tool_calls) for m in result.messages) == (
        sum(len(m.tool_calls) for m in h.messages) - dropped
    )
    for old, new in zip(h.messages, result.messages, strict=False):
        assert (old.row_id, old.created_at, old.content) == (
            new.row_id,
            new.created_at,
            new.content,
        )
        kept = {c.row_id: c for c in new.tool_calls}
        for c in old.tool_calls:
            if c.row_id in kept and kept[c.row_id] != c:
                # Changed: only the result and its marks, never the call or its time.
                k = kept[c.row_id]
                assert (k.external_id, k.function_name, k.arguments, k.created_at) == (
                    c.external_id,
                    c.function_name,
                    c.arguments,
                    c.created_at,
                )
                assert k.response_created_at == c.response_created_at


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.sampled_from(EDIT_TYPES), st.text(min_size=1, max_size=6))
def test_an_edit_either_applies_or_says_why_never_anything_else(
    h: History, kind: str, call_id: str
) -> None:
    edit = Edit(kind, call_id if kind != "append_user_message" else None, content="x", message="y")
    try:
        apply_edits(h, [edit])
    except EditError as error:
        assert error.index == 0 and error.field == "call_id"


@SETTINGS
@given(histories(), options(), st.booleans())
def test_every_call_id_a_replay_shows_names_that_call_or_is_refused_as_shared(
    h: History, o: ReplayOptions, everything: bool
) -> None:
    """The fork page edits a call by the id the replay shows: its own, generated or renamed."""
    o = replace(o, result_token_cap=None)  # the new result is sent whole
    if everything:  # more calls in the payload: no cut, no window
        o = replace(o, as_of=None, freshness_seconds=None)
    shown = results_by_id(replay(h, o).payload, o.format)
    shared = {
        cid
        for cid, n in Counter(c.external_id for m in h.messages for c in m.tool_calls).items()
        if n > 1
    }
    for call_id in shown:
        try:
            edited = apply_edits(h, [Edit("replace_result", call_id, "EDITED")], as_of=o.as_of)
        except EditError as error:
            assert call_id in shared and "share the id" in str(error)
            continue
        after = results_by_id(replay(edited, o).payload, o.format)
        assert after[call_id] == {"content": "EDITED", "is_error": False}
        assert {k: v for k, v in after.items() if k != call_id} == {
            k: v for k, v in shown.items() if k != call_id
        }
