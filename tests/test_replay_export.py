"""The pure parts of the replay's export and pages: options read from query parameters (with
errors naming the parameter), the export document, the comparison of two replays, the payload
as a chat and the diagnostics' anchors. No Flask, no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from replay_strategies import SEARCH_TOOL, assistant, at, call, history, sources, user

from webapp.replay import ReplayOptions, make_synthetic_history, replay, validate
from webapp.replay.diff import diff_replays, payload_call_ids, payload_call_rows
from webapp.replay.export import (
    SCHEMA_VERSION,
    OptionError,
    ReplayQuery,
    comparison_params,
    download_filename,
    export_document,
    form_params,
    parse_comparison,
    parse_query,
    query_params,
    replay_options,
)
from webapp.replay.options import heuristic_tokens
from webapp.views.replay.chat import chat_entries, mark_entries, window
from webapp.views.replay.diagnostics_list import diagnostics_list
from webapp.views.replay.form import form_state, turn_choices

NOW = datetime(2025, 1, 1, 13, 0, tzinfo=UTC)
TURNS = [at(0), at(100)]


def resolve(params: dict[str, str], configured: float | None = 300.0) -> ReplayOptions:
    return replay_options(
        parse_query(params),
        now=NOW,
        turn_times=TURNS,
        configured_freshness=configured,
        count_tokens=heuristic_tokens,
    )


# --- Options ------------------------------------------------------------------------------------


def test_no_parameters_mean_the_documented_defaults():
    options = resolve({})
    assert options.as_of == NOW
    assert options.format == "openai-chat"
    assert options.freshness_seconds == 300.0
    assert options.persistence == "per-run"
    assert options.trim_trailing and options.compact_sources
    assert options.result_token_cap is None and options.context_budget is None
    assert options.prune == "fifo"


def test_every_option_is_read_from_its_parameter():
    options = resolve(
        {
            "format": "anthropic",
            "as_of": "2025-01-01T12:30:00+02:00",
            "freshness": "60",
            "persistence": "per-service-call",
            "trim_trailing": "false",
            "compact_sources": "0",
            "result_token_cap": "200",
            "context_budget": "4000",
            "prune": "turns",
        }
    )
    assert options.format == "anthropic"
    assert options.as_of == datetime(2025, 1, 1, 10, 30, tzinfo=UTC)
    assert options.freshness_seconds == 60.0
    assert options.persistence == "per-service-call"
    assert not options.trim_trailing and not options.compact_sources
    assert (options.result_token_cap, options.context_budget, options.prune) == (200, 4000, "turns")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("turn:1", at(0)), ("turn:2", at(100)), ("2025-01-01T12:00:05", at(5)), ("now", NOW)],
)
def test_as_of_is_now_a_turn_start_or_a_time_taken_as_utc_without_offset(raw, expected):
    assert resolve({"as_of": raw}).as_of == expected


@pytest.mark.parametrize(
    ("raw", "expected"), [("default", 300.0), ("off", None), ("0", 0.0), ("12.5", 12.5)]
)
def test_freshness_is_default_off_or_seconds(raw, expected):
    assert resolve({"freshness": raw}).freshness_seconds == expected


def test_default_freshness_is_what_the_channel_or_project_configured_even_off():
    assert resolve({}, configured=None).freshness_seconds is None
    assert resolve({}, configured=30.0).freshness_seconds == 30.0


def test_empty_token_fields_mean_no_cap_and_no_budget():
    options = resolve({"result_token_cap": "", "context_budget": " "})
    assert options.result_token_cap is None and options.context_budget is None


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"format": "gemini"}, "format"),
        ({"as_of": "yesterday"}, "as_of"),
        ({"as_of": "turn:x"}, "as_of"),
        ({"freshness": "-1"}, "freshness"),
        ({"freshness": "nan"}, "freshness"),
        ({"freshness": "soon"}, "freshness"),
        ({"persistence": "per-turn"}, "persistence"),
        ({"trim_trailing": "maybe"}, "trim_trailing"),
        ({"compact_sources": "2"}, "compact_sources"),
        ({"result_token_cap": "-5"}, "result_token_cap"),
        ({"result_token_cap": "ten"}, "result_token_cap"),
        ({"context_budget": "1e99"}, "context_budget"),
        ({"prune": "lifo"}, "prune"),
    ],
)
def test_an_unusable_parameter_is_an_error_naming_it(params, field):
    with pytest.raises(OptionError) as raised:
        parse_query(params)
    assert raised.value.field == field
    assert raised.value.message


@pytest.mark.parametrize("raw", ["turn:0", "turn:3"])
def test_a_turn_that_does_not_exist_is_an_error_saying_how_many_there_are(raw):
    with pytest.raises(OptionError) as raised:
        resolve({"as_of": raw})
    assert raised.value.field == "as_of"
    assert "2 turns" in raised.value.message


def test_the_api_refuses_unknown_parameters_the_page_ignores_them():
    with pytest.raises(ValueError):
        ReplayQuery.model_validate({"freshnes": "off"})
    assert parse_query({"freshnes": "off", "show": "all"}) == ReplayQuery()


def test_side_prefixed_errors_name_the_side():
    with pytest.raises(OptionError) as raised:
        parse_comparison({"b.prune": "lifo"})
    assert raised.value.field == "b.prune"


def test_the_form_custom_choices_become_the_parameter_and_empty_ones_the_default():
    params = {
        "as_of": "custom",
        "as_of_custom": "2025-01-01T12:00:05",
        "freshness": "custom",
        "freshness_custom": "",
    }
    assert form_params(params) == {"as_of": "2025-01-01T12:00:05"}


def test_query_params_round_trip_and_leave_defaults_out():
    query = parse_query({"format": "anthropic", "trim_trailing": "off", "context_budget": "10"})
    params = query_params(query)
    assert params == {"format": "anthropic", "trim_trailing": "false", "context_budget": "10"}
    assert parse_query(params) == query
    assert query_params(ReplayQuery()) == {}
    assert query_params(query, prefix="a.")["a.format"] == "anthropic"


def test_a_comparison_without_side_parameters_is_per_run_against_per_service_call():
    a, b = parse_comparison({"format": "anthropic"})
    assert (a.persistence, b.persistence) == ("per-run", "per-service-call")
    assert a.format == b.format == "anthropic"
    a, b = parse_comparison({"persistence": "per-service-call"})
    assert (a.persistence, b.persistence) == ("per-service-call", "per-run")


def test_shared_parameters_apply_to_both_sides_unless_a_side_sets_its_own():
    sided = comparison_params({"freshness": "off", "b.freshness": "60", "a.context_budget": "9"})
    assert sided == {"a.freshness": "off", "b.freshness": "60", "a.context_budget": "9"}
    a, b = parse_comparison({"freshness": "off", "b.freshness": "60"})
    assert (a.freshness, b.freshness) == ("off", "60")
    assert a.persistence == b.persistence == "per-run"


# --- The export document ------------------------------------------------------------------------


def conversation():
    return history(
        user(1, "Find the refund policy", 0),
        assistant(
            2,
            "Refunds within 30 days [source1].",
            1,
            (
                call(3, "call_a", response=sources(1, 2)),
                call(4, "", name="lookup", seq=1, response='{"ok": true}'),
            ),
        ),
        user(5, "And shipping?", 100),
        assistant(6, None, 101, (call(7, "call_b", t=101, response=None),), status="failed"),
        tools=(SEARCH_TOOL,),
    )


def test_the_document_carries_everything_the_issue_lists():
    h = conversation()
    query = parse_query({"freshness": "off", "format": "anthropic"})
    options = replay_options(
        query, now=NOW, turn_times=TURNS, configured_freshness=300.0, count_tokens=len
    )
    result = replay(h, options)
    doc = export_document(
        SimpleNamespace(external_id="conv-1", title="Refunds", channel="support"),
        query,
        options,
        result,
        validation=validate(result.payload, "anthropic"),
        naive_problems=[],
        token_counter="stored",
    )
    assert list(doc) == [
        "schema_version",
        "conversation",
        "as_of",
        "format",
        "options",
        "payload",
        "diagnostics",
        "stats",
        "next_source_number",
        "validation",
        "naive_replay_problems",
    ]
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    assert doc["conversation"] == {"id": "conv-1", "title": "Refunds", "channel": "support"}
    assert doc["as_of"] == "2025-01-01T13:00:00+00:00"
    assert doc["options"]["freshness"] == "off" and doc["options"]["freshness_seconds"] is None
    assert doc["options"]["token_counter"] == "stored"
    assert doc["payload"] == result.payload and "messages" in doc["payload"]
    assert doc["next_source_number"] == 3
    assert doc["validation"] == []
    kinds = [d["kind"] for d in doc["diagnostics"]]
    assert {"compacted", "id_generated", "run_not_completed"} <= set(kinds)
    json.dumps(doc)  # plain JSON all the way down


@pytest.mark.parametrize(
    ("cid", "name"),
    [
        ("conv-1", "replay-conv-1-openai-chat.json"),
        ('a"b\r\nc/../d', "replay-a_b_c_.._d-openai-chat.json"),
        ("../..", "replay-conversation-openai-chat.json"),
        ("é" * 300, "replay-conversation-openai-chat.json"),
    ],
)
def test_the_download_name_is_safe_whatever_the_id(cid, name):
    assert download_filename(cid, "openai-chat") == name


# --- Payload ↔ rows, and comparisons --------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_every_payload_call_is_traced_to_its_stored_row(fmt):
    h = make_synthetic_history(40, 6, seed=3)  # empty and duplicated ids among them
    result = replay(h, ReplayOptions(format=fmt, freshness_seconds=None))
    rows = payload_call_rows(h, result, fmt)
    ids = payload_call_ids(result.payload, fmt)
    assert set(rows) == set(ids)
    assert len(set(rows.values())) == len(ids)  # one row per payload call
    stored = {c.row_id: c for m in h.messages for c in m.tool_calls}
    renamed = {d.call_row_id for d in result.diagnostics if d.kind.startswith("id_")}
    for call_id, row in rows.items():
        assert row in renamed or stored[row].external_id == call_id


def test_a_duplicated_id_belongs_to_the_call_that_was_replayed():
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (call(3, "dup", response=None), call(4, "dup", seq=1, response="yes")),
        ),
    )
    result = replay(h, ReplayOptions(freshness_seconds=None))
    assert payload_call_rows(h, result, "openai-chat") == {"dup": 4}


def test_per_run_against_per_service_call_shows_the_failed_runs_rounds_and_why():
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            None,
            1,
            (call(3, "c1"), call(4, "c2", round=1, t=2)),
            status="failed",
        ),
    )
    a = replay(h, ReplayOptions(freshness_seconds=None, trim_trailing=False))
    b = replay(
        h,
        ReplayOptions(freshness_seconds=None, trim_trailing=False, persistence="per-service-call"),
    )
    diff = diff_replays(h, a, "openai-chat", b, "openai-chat")
    assert diff.only_in_a == ()
    assert [d.call.row_id for d in diff.only_in_b] == [3, 4]
    assert all(d.present_in == "b" for d in diff.only_in_b)
    assert {w.kind for d in diff.only_in_b for w in d.why} == {"run_not_completed"}
    assert diff.marks_a == ("same",)  # the user message
    assert diff.marks_b == ("same", "only", "only", "only", "only")
    assert not diff.identical
    stats = {row.key: row for row in diff.stats}
    assert stats["calls_included"].a == 0 and stats["calls_included"].b == 2
    assert stats["calls_included"].differs and not stats["over_budget"].differs


def test_a_result_truncated_on_one_side_is_changed_not_missing():
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "c1", response="x" * 400),)))
    a = replay(h, ReplayOptions(freshness_seconds=None))
    b = replay(h, ReplayOptions(freshness_seconds=None, result_token_cap=10))
    diff = diff_replays(h, a, "openai-chat", b, "openai-chat")
    assert diff.only_in_a == diff.only_in_b == ()
    (changed,) = diff.results_differ
    assert changed.call.row_id == 3 and changed.kinds_b == ("truncated",)
    assert diff.marks_b == ("same", "same", "changed", "same")


def test_freshness_on_against_off_names_the_stale_calls():
    h = history(user(1, "q", 0), assistant(2, "done", 1, (call(3, "c1"), call(4, "c2", seq=1))))
    as_of = at(3600)
    a = replay(h, ReplayOptions(as_of=as_of, freshness_seconds=300))
    b = replay(h, ReplayOptions(as_of=as_of, freshness_seconds=None))
    diff = diff_replays(h, a, "openai-chat", b, "openai-chat")
    assert [d.call.row_id for d in diff.only_in_b] == [3, 4]
    # Its own reason first, then its round's (left with no call, the round was skipped).
    assert [[w.kind for w in d.why] for d in diff.only_in_b] == [["stale", "round_skipped"]] * 2


def test_two_equal_replays_are_identical():
    h = conversation()
    result = replay(h, ReplayOptions(freshness_seconds=None))
    assert diff_replays(h, result, "openai-chat", result, "openai-chat").identical


def test_replays_in_two_formats_compare_calls_but_not_messages():
    h = conversation()
    a = replay(h, ReplayOptions(freshness_seconds=None))
    b = replay(h, ReplayOptions(freshness_seconds=None, format="anthropic"))
    diff = diff_replays(h, a, "openai-chat", b, "anthropic")
    assert not diff.messages_aligned
    assert diff.only_in_a == diff.only_in_b == ()


# --- The chat and the diagnostics list -----------------------------------------------------------


@pytest.mark.parametrize("fmt", ["openai-chat", "openai-responses", "anthropic"])
def test_the_chat_pairs_each_call_with_its_result_in_every_format(fmt):
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (
                call(3, "c1", response="r1"),
                call(4, "c2", seq=1, response="r2", is_error=True),
                call(5, "c3", round=1, t=2, response="r3"),
            ),
        ),
        system="Be brief.",
    )
    result = replay(h, ReplayOptions(format=fmt, freshness_seconds=None))
    rows = payload_call_rows(h, result, fmt)
    entries = chat_entries(result.payload, fmt, rows, result.diagnostics, h)
    assert [(e.kind, e.role) for e in entries] == [
        ("text", "system"),
        ("text", "user"),
        ("round", "assistant"),
        ("round", "assistant"),
        ("text", "assistant"),
    ]
    first, second = entries[2], entries[3]
    assert [(c.call_id, c.result, c.row_id, c.is_error) for c in first.calls] == [
        ("c1", "r1", 3, False),
        ("c2", "r2", 4, True),
    ]
    assert [(c.call_id, c.result, c.arguments) for c in second.calls] == [("c3", "r3", {"q": "c3"})]


def test_a_generated_id_and_a_compaction_show_as_badges_on_the_call():
    h = conversation()
    result = replay(h, ReplayOptions(freshness_seconds=None))
    entries = chat_entries(
        result.payload, "openai-chat", payload_call_rows(h, result, "openai-chat"),
        result.diagnostics, h,
    )  # fmt: skip
    calls = {c.row_id: c for e in entries for c in e.calls}
    assert [b[0] for b in calls[3].badges] == ["compacted"]
    assert [b[0] for b in calls[4].badges] == ["id_generated"]
    assert calls[4].call_id.startswith("call_")


def test_marks_flow_from_messages_to_entries_and_their_calls():
    h = conversation()
    result = replay(h, ReplayOptions(freshness_seconds=None))
    entries = chat_entries(result.payload, "openai-chat", {}, result.diagnostics, h)
    marks = ["same"] * len(result.payload["messages"])
    marks[2] = "only"  # the round's tool_calls message
    marked = mark_entries(entries, marks)
    assert [e.mark for e in marked] == ["same", "only", "same", "same"]
    assert {c.mark for c in marked[1].calls} == {"only"}


def test_the_window_keeps_the_latest_entries_or_those_around_a_linked_call():
    h = make_synthetic_history(200, 3, seed=1)
    result = replay(h, ReplayOptions(freshness_seconds=None))
    rows = payload_call_rows(h, result, "openai-chat")
    entries = chat_entries(result.payload, "openai-chat", rows, result.diagnostics, h)
    assert window(entries, limit=None).total == len(entries)
    latest = window(entries, limit=50)
    assert (latest.start, latest.end, latest.hidden_after) == (len(entries) - 50, len(entries), 0)
    early = next(c.row_id for e in entries[10:] for c in e.calls)
    around = window(entries, limit=50, focus_row=early)
    assert around.start == 0 and around.end == 50
    assert any(c.row_id == early for e in entries[around.start : around.end] for c in e.calls)


def test_every_call_left_out_gets_its_anchor_on_the_diagnostic_that_explains_it():
    h = history(
        user(1, "q", 0),
        assistant(
            2,
            "done",
            1,
            (call(3, "c1", response=None), call(4, "c2", seq=1), call(5, "c3", round=1, t=2)),
        ),
        user(6, "more", 10),
        assistant(7, None, 11, (call(8, "c4", t=11), call(9, "c5", t=11, seq=1)), status="failed"),
    )
    result = replay(h, ReplayOptions(freshness_seconds=None))
    shown = set(payload_call_rows(h, result, "openai-chat").values())
    assert shown == {4, 5}
    listing = diagnostics_list(result.diagnostics, h, shown_calls=shown)
    anchors = {a: r.diagnostic.kind for r in listing.rows for a in r.anchors}
    assert anchors == {
        "call-3": "response_missing",
        "call-8": "run_not_completed",
        "call-9": "run_not_completed",
    }
    by_kind = {r.diagnostic.kind: r for r in listing.rows}
    assert by_kind["response_missing"].call_row_id == 3
    assert by_kind["run_not_completed"].message_row_id == 7
    assert dict(listing.counts) == {"response_missing": 1, "run_not_completed": 1}


def test_a_long_list_is_cut_but_keeps_the_linked_calls_diagnostic():
    h = make_synthetic_history(100, 3, seed=2)
    result = replay(h, ReplayOptions(as_of=at(10**6), freshness_seconds=60))  # all stale
    listing = diagnostics_list(result.diagnostics, h, shown_calls=(), limit=20)
    assert len(listing.rows) == 20 and listing.hidden == len(result.diagnostics) - 20
    last_call = h.messages[-1].tool_calls[-1].row_id
    focused = diagnostics_list(result.diagnostics, h, shown_calls=(), limit=20, focus_row=last_call)
    assert any(f"call-{last_call}" in r.anchors for r in focused.rows)


def test_the_form_shows_what_was_sent_and_offers_each_turn_start():
    state = form_state({"as_of": "2025-01-01T12:00:05+01:00", "freshness": "90", "prune": "turns"})
    assert (state.as_of, state.as_of_custom) == ("custom", "2025-01-01T11:00:05")
    assert (state.freshness, state.freshness_custom) == ("custom", "90")
    assert state.values["prune"] == "turns" and state.values["trim_trailing"] == "true"
    assert (
        form_state({"b.compact_sources": "off"}, prefix="b.").values["compact_sources"] == "false"
    )
    choices = turn_choices(conversation())
    assert [c.value for c in choices] == ["turn:1", "turn:2"]
    assert choices[1].label.startswith("Start of turn 2 · 2025-01-01 12:01:40 UTC")
    assert "And shipping?" in choices[1].label


def test_text_blocks_anthropic_merged_into_one_message_stay_one_bubble():
    h = history(
        user(1, "first", 0),
        assistant(2, None, 1, (call(3, "c1", response=None),), status="failed"),
        user(4, "second", 2),
    )
    result = replay(h, ReplayOptions(format="anthropic", freshness_seconds=None))
    assert len(result.payload["messages"]) == 1
    entries = chat_entries(result.payload, "anthropic", {}, result.diagnostics, h)
    assert [(e.role, e.text, e.blocks) for e in entries] == [("user", "first\n\nsecond", 2)]
