"""Context size per service call and re-send attribution, from plain histories (no database).

The hand-made conversation here is the one of ``analytics_data.py`` (same counts), so the page
tests can check the same numbers end to end.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from analytics_data import PARAMS, at, call, hand_history
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.analytics.attribution import ToolAttribution
from webapp.analytics.context import PARTS, StoredCounts, conversation_context
from webapp.analytics.records import ServiceCallCost
from webapp.analytics.tool_costs import (
    BilledInput,
    InputPrices,
    attribution_turns,
    billed_inputs,
    tool_attribution,
)
from webapp.pricing import PriceOverride
from webapp.replay import ReplayOptions, make_synthetic_history
from webapp.replay.build import build_plan, sorted_messages
from webapp.replay.history import History, Message, ServiceCall
from webapp.replay.options import heuristic_tokens
from webapp.tokens import count_tokens, get_encoding


def o200k(text: str) -> int:
    return len(get_encoding("o200k_base").encode_ordinary(text))


def test_fixed_parts_are_counted_with_the_tokenizer() -> None:
    history, counts = hand_history()
    ctx = conversation_context(history, counts, count=count_tokens, freshness_seconds=300)
    # Known o200k_base outputs (checked against the encoder itself as well).
    assert o200k("You are a helpful assistant.") == 6
    assert [o200k("search"), o200k("Search the docs.")] == [1, 4]
    schema = json.dumps(PARAMS, separators=(",", ":"))
    assert o200k(schema) == 14
    assert {b.system for b in ctx.bars} == {6}
    assert {b.tool_definitions for b in ctx.bars} == {1 + 4 + 14}


def test_hand_computed_context_per_service_call() -> None:
    history, counts = hand_history()
    ctx = conversation_context(history, counts, count=count_tokens, freshness_seconds=300)
    # Function names "search" and "fetch" are one token each, so a call adds 1 + its arguments.
    # a1 r0: user 5.  r1: + round 0 (search 1+7, fetch 1+4 = 13; results 100+300).
    # r2: + round 1 (search 1+6 -> 20; results +50 = 450).
    # a2 starts 60 s after a1's results: all kept (window 300 s). r0: users 9, assistant
    # a1's text 8 + its calls 20 = 28, results 450. r1: + fetch 1+5 -> 34, + 1000 -> 1450.
    # a3 starts 400 s in: every result is older than 300 s and dropped with its call.
    # assistant: texts 8 + 2 = 10.
    rows = [
        (b.label, b.run, b.turn, b.user, b.assistant, b.tool_results, b.reported_input_tokens)
        for b in ctx.bars
    ]
    assert rows == [
        ("#1 r0", 0, 1, 5, 0, 0, 120),
        ("#1 r1", 0, 1, 5, 13, 400, 560),
        ("#1 r2", 0, 1, 5, 20, 450, 640),
        ("#2 r0", 1, 2, 9, 28, 450, 700),
        ("#2 r1", 1, 2, 9, 34, 1450, 1710),
        ("#3 r0", 2, 3, 12, 10, 0, 90),
    ]
    for b in ctx.bars:
        assert (
            b.total
            == sum(getattr(b, part) for part in PARTS)
            == 25 + b.user + b.assistant + (b.tool_results)
        )
    reach = {r.call_row_id: (r.run, r.call_position, r.later_runs) for r in ctx.results}
    assert reach == {11: (0, 0, 1), 12: (0, 0, 1), 13: (0, 1, 1), 14: (1, 0, 0)}


def test_hand_computed_attribution() -> None:
    history, counts = hand_history()
    ctx = conversation_context(history, counts, count=count_tokens, freshness_seconds=300)
    prices = InputPrices({"gpt-4o": PriceOverride(Decimal(2), Decimal(8))})
    # search #1 (100 tok, a1 call 0, one later run): a1 calls 1, 2 + a2 calls 0, 1 -> 4 x 100
    # fetch #1 (300, same): 4 x 300 = 1200
    # search #2 (50, a1 call 1): a1 call 2 + a2's two calls -> 3 x 50 = 150
    # fetch #2 (1000, a2 call 0, no later run): a2 call 1 -> 1000
    # All at $2/M: search 550 tok = $0.0011, fetch 2200 tok = $0.0044.
    assert tool_attribution(ctx, prices) == {
        "search": ToolAttribution(
            "search", 2, 150, 7, 550, Decimal("0.0011"), 0, Decimal("0.0011")
        ),
        "fetch": ToolAttribution(
            "fetch", 2, 1300, 5, 2200, Decimal("0.0044"), 0, Decimal("0.0044")
        ),
    }
    # Without a price, the same tokens are reported as unpriced.
    unpriced = tool_attribution(ctx, InputPrices({"other": PriceOverride(1, 1)}))
    # gpt-4o is still priced by genai-prices' bundled data; an unknown model is not:
    assert unpriced["fetch"].attributed_cost_usd > 0
    renamed = History(
        history.conversation_id,
        None,
        None,
        (),
        tuple(
            Message(
                m.row_id,
                m.external_id,
                m.role,
                m.content,
                m.created_at,
                m.status,
                "my-own-llm" if m.model else None,
                m.tool_calls,
                tuple(
                    ServiceCall(s.round_index, "my-own-llm", s.input_tokens)
                    for s in m.service_calls
                ),
            )
            for m in history.messages
        ),
    )
    ctx2 = conversation_context(renamed, counts, count=count_tokens, freshness_seconds=300)
    got = tool_attribution(ctx2, InputPrices())["fetch"]
    assert (got.attributed_cost_usd, got.unpriced_input_tokens) == (Decimal(0), 2200)


def test_tool_results_in_the_bars_add_up_to_the_attributed_tokens() -> None:
    for window in (None, 300.0, 30.0):
        for mode in ("per-run", "per-service-call"):
            history = make_synthetic_history(30, 8, seed=7)
            ctx = conversation_context(
                history,
                StoredCounts(),
                count=heuristic_tokens,
                freshness_seconds=window,
                persistence=mode,  # type: ignore[arg-type]
            )
            attributed = tool_attribution(ctx, InputPrices())
            assert sum(b.tool_results for b in ctx.bars) == sum(
                a.resent_input_tokens for a in attributed.values()
            )
            assert len(attribution_turns(ctx, InputPrices())) == ctx.runs


def _reference_prior(history: History, pos: int, options: ReplayOptions) -> tuple[int, int, int]:
    """(user, assistant, tool results) a run at sorted position ``pos`` starts from, taken from
    the replay library itself at that moment (heuristic counts, no stored counts)."""
    plan = build_plan(history, options)
    messages = sorted_messages(history)
    user = assistant = results = 0
    for unit in plan.units:
        if unit.pos >= pos:
            continue
        if unit.kind == "user":
            user += heuristic_tokens(messages[unit.pos].content or "")
        elif unit.kind == "text":
            assistant += heuristic_tokens(messages[unit.pos].content or "")
        elif unit.kind == "round":
            for out in unit.calls:
                assistant += heuristic_tokens(out.name) + heuristic_tokens(out.arguments_json)
                results += heuristic_tokens(out.result or "")
    return user, assistant, results


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    window=st.sampled_from([None, 15.0, 60.0, 300.0]),
    mode=st.sampled_from(["per-run", "per-service-call"]),
)
def test_each_run_starts_from_what_replay_gives_at_that_moment(
    seed: int, window: float | None, mode: str
) -> None:
    """The one-pass walk equals a full replay at every run's start (as_of = its created_at)."""
    history = make_synthetic_history(12, 7, seed=seed)
    ctx = conversation_context(
        history,
        StoredCounts(),
        count=heuristic_tokens,
        freshness_seconds=window,
        persistence=mode,  # type: ignore[arg-type]
    )
    first_bar = {}
    for b in ctx.bars:
        first_bar.setdefault(b.run, b)
    run = 0
    for pos, m in enumerate(sorted_messages(history)):
        if m.role != "assistant":
            continue
        bar = first_bar.get(run)
        run += 1
        if bar is None:
            continue
        # The first service call of a run holds none of the run's own rounds.
        options = ReplayOptions(
            as_of=m.created_at,
            freshness_seconds=window,
            persistence=mode,  # type: ignore[arg-type]
        )
        assert (bar.user, bar.assistant, bar.tool_results) == _reference_prior(
            history, pos, options
        )


def test_compacted_results_weigh_less_in_later_runs() -> None:
    sources = json.dumps([{"source_number": n, "text": "lorem ipsum " * 10} for n in range(4)])
    history = History(
        "c",
        None,
        None,
        (),
        (
            Message(1, "u1", "user", "q", at(0)),
            Message(
                2,
                "a1",
                "assistant",
                "See [source2].",
                at(1),
                "completed",
                None,
                (call(10, 0, 0, "search", sources, 2),),
            ),
            Message(3, "u2", "user", "more", at(10)),
            Message(4, "a2", "assistant", "ok", at(11), "completed"),
        ),
    )
    counts = StoredCounts(results={10: 400})
    ctx = conversation_context(history, counts, count=count_tokens, freshness_seconds=None)
    kept_item = json.dumps(
        [{"source_number": 2, "text": "lorem ipsum " * 10}], separators=(",", ":")
    )
    (result,) = ctx.results
    assert result.tokens == 400  # within its own run the whole stored result was sent
    assert result.replayed_tokens == count_tokens(kept_item) < 400
    assert [b.tool_results for b in ctx.bars] == [0, 400, result.replayed_tokens]


@pytest.mark.parametrize(
    ("mode", "later", "second_run_results"), [("per-run", 0, 0), ("per-service-call", 1, 70)]
)
def test_a_failed_run_is_carried_only_in_per_service_call_mode(
    mode: str, later: int, second_run_results: int
) -> None:
    history = History(
        "c",
        None,
        None,
        (),
        (
            Message(1, "u1", "user", "q", at(0)),
            Message(
                2,
                "a1",
                "assistant",
                None,
                at(1),
                "failed",
                None,
                (call(10, 0, 0, "lookup", "x", 2), call(11, 1, 0, "lookup", "y", 3)),
            ),
            Message(3, "u2", "user", "again", at(10)),
            Message(4, "a2", "assistant", "ok", at(11), "completed"),
        ),
    )
    counts = StoredCounts(results={10: 70, 11: 30})
    ctx = conversation_context(
        history,
        counts,
        count=count_tokens,
        freshness_seconds=None,
        persistence=mode,  # type: ignore[arg-type]
    )
    # Round 1 is trailing (no later service call consumed it) and is trimmed in both modes.
    assert {r.call_row_id: r.later_runs for r in ctx.results} == {10: later, 11: 0}
    assert ctx.bars[-1].tool_results == second_run_results
    # The failed run still made two service calls, which the chart shows.
    assert [b.label for b in ctx.bars] == ["#1 r0", "#1 r1", "#2 r0"]


@pytest.mark.parametrize("imported", [False, True])
def test_imported_results_never_go_stale_as_in_the_replay(imported: bool) -> None:
    history = History(
        "c",
        None,
        None,
        (),
        (
            Message(1, "u1", "user", "q", at(0)),
            Message(
                2,
                "a1",
                "assistant",
                "done",
                at(1),
                "completed",
                None,
                (call(10, 0, 0, "lookup", "x", 2),),
                imported=imported,
            ),
            Message(3, "u2", "user", "an hour later", at(3600)),
            Message(4, "a2", "assistant", "ok", at(3601), "completed"),
        ),
    )
    ctx = conversation_context(
        history, StoredCounts(results={10: 70}), count=count_tokens, freshness_seconds=300
    )
    carried = 70 if imported else 0
    assert ctx.bars[-1].tool_results == carried
    assert {r.call_row_id: r.later_runs for r in ctx.results} == {10: 1 if imported else 0}


def test_empty_history() -> None:
    ctx = conversation_context(
        History("c", None, None, (), ()), StoredCounts(), count=count_tokens, freshness_seconds=1
    )
    assert (ctx.bars, ctx.results, ctx.runs, ctx.model) == ((), (), 0, None)


def test_attribution_never_exceeds_what_each_service_call_was_billed() -> None:
    """Issue 23: the demo attributed $180 to one tool of a $200 total while the cost per day
    summed to $10.80: counted context priced at list price, against usage that reported far
    less. Where usage was reported, each call's results share its billed input cost."""
    history, counts = hand_history()
    ctx = conversation_context(history, counts, count=count_tokens, freshness_seconds=300)
    prices = InputPrices({"gpt-4o": PriceOverride(Decimal(2), Decimal(8))})
    # Every call reported 10 input tokens, billed $0.001 of input: far below what is counted.
    billed = {
        (b.message_row_id, b.round_index): BilledInput(Decimal("0.001"), 10) for b in ctx.bars
    }
    got = tool_attribution(ctx, prices, billed)
    per_bar = [Decimal("0.001") * b.tool_results / b.total for b in ctx.bars]
    assert sum(a.attributed_cost_usd for a in got.values()) == pytest.approx(sum(per_bar))
    assert sum(a.attributed_cost_usd for a in got.values()) <= Decimal("0.001") * len(ctx.bars)
    assert all(a.estimated_cost_usd == 0 for a in got.values())
    # Without reported usage the list price applies, and all of it is an estimate.
    listed = tool_attribution(ctx, prices)
    assert all(a.estimated_cost_usd == a.attributed_cost_usd for a in listed.values())


def test_the_billed_input_is_the_input_part_of_the_stored_cost() -> None:
    history, _ = hand_history()
    prices = InputPrices({"gpt-4o": PriceOverride(Decimal(2), Decimal(8))})
    usage = {(m.row_id, s.round_index): s for m in history.messages for s in m.service_calls}
    (row, rnd), reported = next(iter(usage.items()))
    stored = Decimal("0.01")
    got = billed_inputs(
        history, [ServiceCallCost(row, rnd, "openai", stored, "override", "x")], prices
    )
    input_usd = reported.input_tokens * 2
    output_usd = (reported.output_tokens or 0) * 8
    assert got == {
        (row, rnd): BilledInput(
            stored * input_usd / (input_usd + output_usd), reported.input_tokens
        )
    }
    # No stored cost (no price known): nothing billed, the list price estimates it.
    assert billed_inputs(history, [ServiceCallCost(row, rnd, None, None, None, None)], prices) == {}
