"""Property tests: whatever the stored history looks like, the replay is something a provider
accepts, fits the budget when that is possible, and is the same every time."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from webapp.replay import (
    FORMATS,
    History,
    ReplayOptions,
    naive_replay_problems,
    replay,
    validate,
)
from webapp.replay.build import latest_moment, sorted_messages
from webapp.replay.formats import payload_messages
from webapp.replay.names import name_is_valid, tool_name_map
from webapp.replay.validate import Memo

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import as_it_stood, event_times, histories, options
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import as_it_stood, event_times, histories, options

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(histories(), options())
def test_every_replay_is_accepted_by_the_provider_and_deterministic(
    h: History, o: ReplayOptions
) -> None:
    first = replay(h, o)
    problems = validate(first.payload, o.format)
    # The only acceptable problem is "nothing to send", and the replay must have said so.
    assert [p for p in problems if p.code != "empty_payload"] == [], (problems, first.payload)
    if problems:
        assert any(d.kind == "empty_payload" for d in first.diagnostics)
    second = replay(h, o)
    assert json.dumps(first.payload, sort_keys=False) == json.dumps(second.payload, sort_keys=False)
    assert first.diagnostics == second.diagnostics
    assert first.stats == second.stats
    json.dumps(first.to_dict())  # exportable


def _user_texts(payload: dict, fmt: str) -> list[str]:  # type: ignore[type-arg]
    return [
        m["content"]
        for m in payload_messages(payload, fmt)
        if m.get("role") == "user" and isinstance(m.get("content"), str)
    ]


@SETTINGS
@given(histories(), options(fmt="openai-chat"), st.integers(0, 400))
def test_budget_is_respected_when_it_can_be(h: History, o: ReplayOptions, budget: int) -> None:
    unlimited = replay(h, replace(o, context_budget=None))
    result = replay(h, replace(o, context_budget=budget))
    stats = result.stats
    assert validate(result.payload, "openai-chat") == [] or not result.payload["messages"]
    if not stats["over_budget"]:
        assert stats["estimated_tokens"] <= budget
    else:
        # Only unremovable things are left: system messages and the latest user message (fifo)
        # or the latest turn (turns).
        rest = [m for m in result.payload["messages"] if m["role"] != "system"]
        if o.prune == "fifo":
            assert len(rest) <= 1 and all(m["role"] == "user" for m in rest)
        else:
            assert sum(m["role"] == "user" for m in rest) <= 1
    if unlimited.stats["estimated_tokens"] <= budget:
        assert result.payload == unlimited.payload  # nothing pruned when it already fits
    # Pruning only ever removes messages: what is left appears, in order, in the unpruned payload.
    remaining = iter(unlimited.payload["messages"])
    assert all(any(m == n for n in remaining) for m in result.payload["messages"])
    # The latest user message survives any budget.
    latest = _user_texts(unlimited.payload, "openai-chat")[-1:]
    assert _user_texts(result.payload, "openai-chat")[-1:] == latest


@SETTINGS
@given(histories(), options())
def test_budget_respected_in_every_format(h: History, o: ReplayOptions) -> None:
    result = replay(h, o)
    if o.context_budget is not None and not result.stats["over_budget"]:
        assert result.stats["estimated_tokens"] <= o.context_budget


def _visible_trouble(h: History, o: ReplayOptions) -> bool:
    """Whether the raw rows at as_of have an unanswered call, an empty id or a duplicate id."""
    messages = sorted_messages(h)
    as_of = o.as_of or latest_moment(messages)
    seen: set[str] = set()
    trouble = False
    for m in messages:
        if as_of is not None and m.created_at > as_of:
            continue
        for c in m.tool_calls:
            if as_of is not None and c.created_at > as_of:
                continue
            rc = c.response_created_at
            answered = c.response is not None and (as_of is None or rc is None or rc <= as_of)
            if not answered or not c.external_id or c.external_id in seen:
                trouble = True
            seen.add(c.external_id)
    return trouble


@SETTINGS
@given(histories(), st.sampled_from(FORMATS), st.data())
def test_naive_lint_finds_problems_whenever_raw_rows_are_broken(
    h: History, fmt: str, data: st.DataObject
) -> None:
    o = data.draw(options(fmt=fmt))
    problems = naive_replay_problems(h, o)
    if _visible_trouble(h, o):
        codes = {p.code for p in problems}
        assert codes & {"unanswered_call", "empty_id", "duplicate_id"}, problems
    # ...while the real replay of the same rows is fine.
    memo = Memo()
    real = validate(replay(h, o).payload, fmt, memo)
    assert [p for p in real if p.code != "empty_payload"] == []
    # The export checks the naive payload with what the real one's check learned: the same.
    assert naive_replay_problems(h, o, memo) == problems


def _names(h: History) -> set[str]:
    return {t.name for t in h.tool_definitions} | {
        c.function_name for m in h.messages for c in m.tool_calls
    }


@SETTINGS
@given(histories(), st.data())
def test_as_of_replays_the_history_as_it_stood_then(h: History, data: st.DataObject) -> None:
    """Replaying at a moment inside a run — a failed, cancelled or in-progress run included —
    gives what replaying the rows stored by then gives: no later call, response or final text,
    and nothing compacted against a text that did not exist yet (issue 12, case 1)."""
    times = event_times(h)
    if not times:
        return
    moment = data.draw(st.sampled_from(times))
    as_of = moment + timedelta(seconds=data.draw(st.sampled_from([-0.25, 0.0, 0.25])))
    o = data.draw(options())
    # A budget prunes whole units, the same ones when the units are the same; mostly leave it
    # out so that a difference in the units shows in the payload. Per-run mode replays nothing
    # of an unfinished run, so mostly use per-service-call, which shows what the run had.
    budget = data.draw(st.sampled_from([None, None, None, o.context_budget]))
    persistence = data.draw(st.sampled_from(["per-service-call"] * 3 + ["per-run"]))
    o = replace(o, as_of=as_of, context_budget=budget, persistence=persistence)
    then = as_it_stood(h, as_of)
    # Tool names are mapped per history; a later call may add a name that changes the mapping.
    names = _names(then)
    assume(
        {k: v for k, v in tool_name_map(_names(h)).items() if k in names} == tool_name_map(names)
    )
    now, stood = replay(h, o), replay(then, o)
    assert now.payload == stood.payload
    assert now.next_source_number == stood.next_source_number


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                "search",
                "search_v2",
                "search.v2",
                "search v2",
                "a" * 64,
                "a" * 65,
                "a" * 66,
                "météo",
                "",
                "x.y",
                "x y",
                "tool",
            ]
        ),
        unique=True,
    )
)
def test_tool_names_map_to_distinct_valid_names_whatever_the_order(names: list[str]) -> None:
    mapping = tool_name_map(names)
    sent = [mapping.get(n, n) for n in names]
    assert all(name_is_valid(n) for n in sent)
    assert len(set(sent)) == len(names)  # collision-free
    assert all(n not in mapping for n in names if name_is_valid(n))  # valid names stay
    assert tool_name_map(reversed(names)) == mapping  # stable: the set decides
