"""The timeline's pure parts: rounds, page budgets, badges, the waterfall, cursors, filters."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from webapp.queries import cursors
from webapp.queries.records import CallRecord, MessageRecord
from webapp.views import formatting
from webapp.views.common import BadParameter
from webapp.views.conversations import badges, gantt
from webapp.views.conversations import timeline_model as model
from webapp.views.conversations.list_filters import parse_filters

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def call(
    round_index: int = 0,
    seq: int = 0,
    *,
    name: str = "search",
    response: bool = True,
    answered: datetime | None = NOW,
    start_ms: float | None = None,
    duration_ms: float | None = None,
    **fields,
) -> CallRecord:
    started = NOW + timedelta(milliseconds=start_ms) if start_ms is not None else None
    ended = started + timedelta(milliseconds=duration_ms) if started and duration_ms else None
    values = dict(
        id=round_index * 100 + seq + 1,
        message_id=1,
        round_index=round_index,
        sequence_index=seq,
        external_tool_call_id=f"c{round_index}{seq}",
        function_name=name,
        arguments={"q": "x"},
        created_at=NOW - timedelta(seconds=1),
        started_at=started,
        ended_at=ended,
        has_response=response,
        response_created_at=answered if response else None,
        is_error=False,
        redactions=(),
        arguments_tokens=3,
        response_tokens=10,
        response_bytes=40,
    )
    values.update(fields)
    return CallRecord(**values)


def message(mid: int, role: str = "assistant", content: str | None = None) -> MessageRecord:
    return MessageRecord(mid, f"m{mid}", role, content, NOW, None, None, None)


CTX = model.BadgeContext(now=NOW, freshness_seconds=300, token_cap=2000)


def kinds(c: CallRecord, ctx=CTX, cited=None) -> list[str]:
    return [b.kind for b in model.call_view(c, ctx, cited).badges]


def test_calls_are_grouped_into_rounds_in_order_with_parallel_calls_together():
    views = [model.call_view(c, CTX, None) for c in (call(0, 0), call(0, 1), call(1, 0))]
    rounds = model.group_rounds(views)
    assert [(r.index, len(r.calls), r.parallel) for r in rounds] == [(0, 2, True), (1, 1, False)]
    continued = model.group_rounds(views[1:], continued_round=0)
    assert [r.continued for r in continued] == [True, False]


def test_a_page_stops_at_the_message_that_reaches_the_call_budget():
    msgs = [message(i) for i in range(1, 6)]
    per_message = {1: [0] * 10, 2: [0] * 30, 3: [0] * 30, 4: [0] * 5}
    assert model.messages_within_budget(msgs, per_message, 60) == 3
    assert model.messages_within_budget(msgs, per_message, 1000) == 5
    # A single huge run still makes a page: paging always moves forward.
    assert model.messages_within_budget(msgs, {1: [0] * 500}, 60) == 1


def test_runs_with_more_calls_than_shown_point_to_the_next_chunk():
    first = [call(0, s) for s in range(3)]
    run = model.run_view(message(1), first, ctx=CTX, usage=None, has_more=True)
    assert run.more_after == "0.2"
    assert model.parse_call_key(run.more_after) == (0, 2)
    assert model.run_view(message(1), first, ctx=CTX, usage=None, has_more=False).more_after is None
    for bad in ("", "1", "a.b", "-1.0", "1.-2"):
        with pytest.raises(ValueError):
            model.parse_call_key(bad)


def test_turns_are_numbered_from_the_user_messages_before_the_page():
    msgs = [message(1, "user"), message(2), message(3, "user"), message(4)]
    views = model.message_views(msgs, calls={}, summaries={}, usage={}, ctx=CTX, turns_before=4)
    assert [v.turn for v in views] == [5, None, 6, None]


def test_error_missing_and_redacted_badges():
    assert kinds(call(is_error=True)) == ["error"]
    assert kinds(call(response=False)) == ["no-response"]
    assert kinds(call(redactions=("mask-pii",))) == ["redacted"]
    assert kinds(call()) == []


def test_stale_uses_the_response_time_or_else_the_call_time():
    old = NOW - timedelta(seconds=301)
    assert kinds(call(answered=old)) == ["stale"]
    assert kinds(call(answered=NOW - timedelta(seconds=299))) == []
    assert kinds(call(answered=None, created_at=old)) == ["stale"]
    # No window: never stale. A missing response is not stale, it is missing.
    assert kinds(call(answered=old), ctx=model.BadgeContext(NOW, None, None)) == []
    assert kinds(call(response=False, created_at=old)) == ["no-response"]



def test_truncation_forecast_uses_the_token_cap():
    assert kinds(call(response_tokens=2001)) == ["truncated"]
    assert kinds(call(response_tokens=2000)) == []
    assert kinds(call(response_tokens=10**6), ctx=model.BadgeContext(NOW, 300, None)) == []


def test_compaction_forecast_names_the_uncited_sources():
    sources = json.dumps([{"source_number": n, "text": "t"} for n in (1, 2, 3)])
    c = call(list_response=sources)
    cited = badges.citations("See [source1] and [SOURCE3].")
    view = model.call_view(c, CTX, cited)
    assert [b.kind for b in view.badges] == ["compacted"]
    assert "2" in view.badges[0].title and "3" not in view.badges[0].title
    # All cited, no final text yet, or not a sources list: nothing to compact.
    assert kinds(c, cited=badges.citations("[source1][source2][source3]")) == []
    assert kinds(c, cited=badges.citations(None)) == []
    assert kinds(call(list_response='[{"a": 1}]'), cited=frozenset({1})) == []


def test_imported_calls_are_forecast_neither_stale_nor_compacted():
    """The replay sends an imported run as it was sent (issue 12): no window, no compaction."""
    sources = json.dumps([{"source_number": n, "text": "t"} for n in (1, 2)])
    old = call(answered=NOW - timedelta(hours=5), list_response=sources)
    cited = badges.citations("See [source1].")
    assert kinds(old, cited=cited) == ["stale", "compacted"]
    assert [b.kind for b in model.call_view(old, CTX, cited, imported=True).badges] == []
    run = model.run_view(
        MessageRecord(1, "m1", "assistant", "See [source1].", NOW, None, None, None, True),
        [old],
        ctx=CTX,
        usage=None,
        has_more=False,
        with_waterfall=False,
    )
    assert run.rounds[0].calls[0].badges == []


def test_waterfall_bars_overlap_for_parallel_calls_and_escape_names():
    calls = [
        call(0, 0, name="<b>bold</b>", start_ms=0, duration_ms=400),
        call(0, 1, name="fast", start_ms=10, duration_ms=100),
        call(1, 0, name="later", start_ms=500, duration_ms=50),
        call(1, 1, name="untimed"),
    ]
    figure = gantt.run_waterfall(calls)
    assert figure is not None
    round0, round1 = figure["data"]
    assert round0["base"] == [0.0, 10.0] and round0["x"] == [400.0, 100.0]
    assert round0["base"][1] < round0["base"][0] + round0["x"][0]  # the two overlap in time
    assert round1["base"] == [500.0] and len(round1["y"]) == 1  # the untimed call has no bar
    assert "<b>" not in json.dumps(figure) and "&lt;b&gt;bold&lt;/b&gt;" in round0["y"][0]
    assert gantt.run_waterfall([call()]) is None


@pytest.mark.parametrize(
    "value", [NOW, 0, 42, Decimal("1.250000000"), None, datetime(2020, 1, 1, tzinfo=UTC)]
)
def test_cursors_round_trip(value):
    assert cursors.decode(cursors.encode(value, 17)) == (value, 17)


@pytest.mark.parametrize("damaged", ["", "x", "!!!", "W1siaSIsIjEiXV0", "WyJ0IiwieCIsMV0"])
def test_damaged_cursors_are_refused(damaged):
    with pytest.raises(cursors.CursorError):
        cursors.decode(damaged)


def test_list_filters_parse_and_round_trip_to_query_args():
    filters = parse_filters(
        {
            "q": "  refund   order ",
            "channel": "support",
            "has_errors": "1",
            "from": "2026-03-01",
            "to": "2026-03-10",
            "sort": "calls",
            "missing_responses": "",
            "failed_runs": "on",
        }
    )
    assert filters.q == "refund order" and filters.date_from == date(2026, 3, 1)
    assert filters.has_errors and filters.failed_runs and not filters.missing_responses
    assert parse_filters(filters.query_args()) == filters
    assert parse_filters({}).query_args() == {}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"sort": "nope"}, "sort"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-03-02", "to": "2026-03-01"}, "to"),
        ({"q": "x" * 201}, "q"),
    ],
)
def test_bad_list_filters_name_the_parameter(args, field):
    with pytest.raises(BadParameter) as info:
        parse_filters(args)
    assert info.value.field == field


def test_formatting():
    assert formatting.duration(None) == "\u2013"
    assert formatting.duration(0.5) == "0.50 ms"
    assert formatting.duration(420) == "420 ms"
    assert formatting.duration(30_000) == "30.00 s"
    assert formatting.duration(125_000) == "2 min 5 s"
    assert formatting.size(512) == "512 B" and formatting.size(2048) == "2.0 KB"
    assert formatting.size(5 * 1024 * 1024) == "5.0 MB"
    assert (
        formatting.usd(Decimal("0.0038")) == "$0.0038"
        and formatting.usd(Decimal("12.5")) == "$12.50"
    )
    assert formatting.number(1234567) == "1,234,567"
    assert formatting.ago(NOW - timedelta(minutes=3), NOW) == "3 min ago"
    assert formatting.timestamp(NOW) == "2026-03-10 12:00:00 UTC"


def test_error_rates_are_never_shown_as_zero_nor_red_without_errors():
    # 2 errors in 5,000 calls used to read "0.0%" (in red).
    assert formatting.percent(2 / 5000) == "<0.1%"
    assert formatting.percent(0.0) == "0%"
    assert formatting.percent(0.125) == "12.5%"
    assert formatting.error_level(0.0) == ""
    assert formatting.error_level(None) == ""
    assert formatting.error_level(2 / 5000) == "text-warn"
    assert formatting.error_level(formatting.ERROR_RATE_ALERT) == "text-error"


def test_ages_are_human_readable_with_the_exact_time_in_the_title():
    html = str(formatting.age(NOW - timedelta(days=2, hours=3), NOW))
    assert html == (
        '<time datetime="2026-03-08T09:00:00+00:00" title="2026-03-08 09:00:00 UTC">'
        "2 d ago</time>"
    )
    assert formatting.ago(NOW - timedelta(seconds=5), NOW) == "5 s ago"
    assert formatting.ago(NOW - timedelta(hours=5), NOW) == "5 h ago"


def test_waterfall_tooltips_say_how_long_a_bar_lasts_not_where_it_ends():
    """Issue 23: "starts at 1440 ms, lasts 2390 ms" for a 950 ms call. With a base, plotly's
    %{x} in a bar's tooltip is base + length; the duration comes from customdata."""
    calls = [call(0, 0, start_ms=0, duration_ms=10), call(0, 1, start_ms=1440, duration_ms=950)]
    figure = gantt.run_waterfall(calls)
    assert figure is not None
    (bars,) = figure["data"]
    assert bars["base"] == [0.0, 1440.0] and bars["customdata"] == [10.0, 950.0]
    assert "lasts %{customdata:.0f} ms" in bars["hovertemplate"]
    assert "%{x" not in bars["hovertemplate"]
