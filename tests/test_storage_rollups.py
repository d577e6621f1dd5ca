"""The roll-ups never drift from the rows they sum (issue 24).

Random sequences of what changes tool calls and service calls, through the real write paths:
native message posts (new calls, responses and usage arriving later), MessageTool posts (to
placeholders too), OTLP exports (a trace sent in part, then whole: the projector rewrites its
turns, deleting and inserting calls and usage), conversation deletes, purges, the token pass
and the stored tool costs brought up to date. After each sequence every roll-up row equals the
recomputation from the rows (the tool-cost roll-up: from conversation_tool_cost) (counts,
sums, newest call and the sketches' bins exactly), the merged sketches' quantiles are within the
sketch's relative accuracy of the exact quantiles, and the pages' reads (the tools statistics,
the daily series) give the figures the rows give, over ranges that start and end inside hours.
On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.otlp_support import agent_run, traces_protobuf
from webapp.analytics.filters import ChartFilters
from webapp.analytics.rollups import (
    DAY,
    HOUR,
    RELATIVE_ACCURACY,
    Bins,
    bucket_start,
    duration_of,
    quantile,
    split_range,
)
from webapp.db import db, utcnow
from webapp.ingest import tool_cost_rollup
from webapp.ingest.purge import purge
from webapp.ingest.rollups import flush, recompute
from webapp.ingest.token_pass import count_pending
from webapp.models import ModelRollup, ToolInvocation, ToolRollup
from webapp.queries import analytics, tool_stats
from webapp.services.attribution_store import refresh_stale

BASE = datetime(2026, 3, 10, 7, 0, tzinfo=UTC)
NAMES = ("search", "fetch", "lookup")
MODELS = ("gpt-4o", "claude-sonnet-4", "my-own-llm")
PB = "application/x-protobuf"


def _call(conv: int, msg: int, rnd: int, seq: int, respond: bool) -> dict:
    """A native call whose content depends only on its key, so re-posts never conflict."""
    k = conv * 1000 + msg * 100 + rnd * 10 + seq
    at = BASE + timedelta(hours=k % 29, minutes=(k * 7) % 60, seconds=k % 13)
    call = {
        "id": f"call-{k}",
        "name": NAMES[k % 3],
        "arguments": {"q": k},
        "round_index": rnd,
        "sequence_index": seq,
        "created_at": at.isoformat(),
    }
    if k % 4:
        call["started_at"] = at.isoformat()
        call["ended_at"] = (at + timedelta(milliseconds=(k * 37) % 5000 + k % 3)).isoformat()
    if respond:
        call["response"] = {"content": "r" * (k % 50), "is_error": k % 5 == 0}
    return call


def _usage(conv: int, msg: int, rnd: int, cached: bool) -> dict:
    k = conv * 100 + msg * 10 + rnd
    usage = {
        "round_index": rnd,
        "model": MODELS[k % 3],
        "input_tokens": 100 + k,
        "output_tokens": 10 + k % 7,
        "created_at": (BASE + timedelta(hours=k % 31, minutes=k % 60)).isoformat(),
    }
    if cached:
        usage["cached_tokens"] = k % 50
    return usage


native_op = st.tuples(
    st.just("native"),
    st.integers(0, 2),  # conversation
    st.integers(0, 2),  # message
    st.integers(1, 4),  # calls
    st.booleans(),  # with responses
    st.booleans(),  # usage with cached tokens (completed by a later post)
)
tools_op = st.tuples(st.just("tools"), st.integers(0, 3), st.integers(1, 3), st.booleans())
otlp_op = st.tuples(st.just("otlp"), st.integers(1, 3), st.booleans())
delete_op = st.tuples(st.just("delete"), st.sampled_from(["c0", "c1", "c2", "o1", "o2", "o3"]))
purge_op = st.tuples(st.just("purge"), st.booleans())
tokens_op = st.tuples(st.just("tokens"))
costs_op = st.tuples(st.just("costs"))
ops = st.lists(
    st.one_of(native_op, native_op, tools_op, otlp_op, delete_op, purge_op, tokens_op, costs_op),
    min_size=1,
    max_size=8,
)


def _apply(app, client, key, op: tuple) -> None:
    kind = op[0]
    if kind == "native":
        _, conv, msg, n, respond, cached = op
        calls = [_call(conv, msg, i // 2, i % 2, respond) for i in range(n)]
        message = {
            "id": f"a{conv}-{msg}",
            "role": "assistant",
            "content": "ok",
            "model": "gpt-4o",
            "tool_calls": calls,
            "usage": [_usage(conv, msg, r, cached) for r in range(1 + (n - 1) // 2)],
        }
        response = client.post(
            f"/api/v1/conversations/c{conv}/messages",
            json={"messages": [message]},
            headers=key.headers,
        )
        assert response.status_code in (200, 201), response.get_json()
    elif kind == "tools":
        _, target, n, respond = op
        message_id = f"p{target}" if target < 3 else "a0-0"
        tools = []
        for i in range(n):
            call = _call(9 if target < 3 else 0, target if target < 3 else 0, 0, i, respond)
            item = {
                "externalToolCallId": call["id"],
                "functionName": call["name"],
                "arguments": call["arguments"],
                "roundIndex": 0,
                "sequenceIndex": i,
            }
            if respond:
                item["response"] = {"content": call["response"]["content"]}
            tools.append(item)
        response = client.post(
            "/api/v1/messages/tools",
            json={"messageId": message_id, "tools": tools},
            headers=key.headers,
        )
        # A MessageTool call that differs from the native one of the same key is a conflict,
        # which the MessageTool endpoints answer as 400 with code `conflict` (the unique_sdk
        # turns only a 400 into InvalidRequestError; docs/api.md) and store nothing of.
        if response.status_code not in (200, 201):
            assert response.status_code == 400, response.get_json()
            assert response.get_json()["error"]["code"] == "conflict", response.get_json()
    elif kind == "otlp":
        _, trace, whole = op
        run = agent_run(trace, rounds=2 + trace % 2, parallel=2, conversation=f"o{trace}")
        spans = run.spans if whole else run.spans[: len(run.spans) // 2]
        response = client.post(
            "/v1/traces",
            data=traces_protobuf(spans),
            headers={"Content-Type": PB, "Authorization": f"Bearer {key.key}"},
        )
        assert response.status_code == 200, response.data[:300]
    elif kind == "delete":
        response = client.delete(f"/api/v1/conversations/{op[1]}", headers=key.headers)
        assert response.status_code in (200, 204, 404)
    elif kind == "purge":
        with app.app_context():
            cutoff = utcnow() + (timedelta(days=1) if op[1] else -timedelta(days=1))
            purge(cutoff, None, sleep=lambda _s: None)
    elif kind == "tokens":
        with app.app_context():
            count_pending()
    elif kind == "costs":
        with app.app_context():
            refresh_stale(key.project_id, {})


def _reset(app) -> None:
    with app.app_context():
        for table in (
            "otel_turn_trace",
            "otel_turn",
            "otel_link",
            "otel_span",
            "otel_log",
            "conversation",
            "message",
            "tool_rollup",
            "model_rollup",
            "project_tool_cost",
        ):
            db.session.execute(sa.text(f"DELETE FROM {table}"))
        db.session.commit()


def _stored_tools() -> dict:
    out = {}
    for r in db.session.scalars(sa.select(ToolRollup)):
        bucket = r.bucket if r.bucket.tzinfo else r.bucket.replace(tzinfo=UTC)
        out[(r.project_id, r.span, bucket, r.function_name)] = r
    return out


def _assert_no_drift(project_id: int) -> None:
    tools, models = recompute()
    stored = _stored_tools()
    assert set(stored) == set(tools)
    for key, part in tools.items():
        row = stored[key]
        for name in ("calls", "errors", "responses", "missing", "bytes_n", "bytes_sum"):
            assert getattr(row, name) == getattr(part, name), (key, name)
        for name in ("tokens_n", "tokens_sum", "timed"):
            assert getattr(row, name) == getattr(part, name), (key, name)
        last = row.last_at if row.last_at.tzinfo else row.last_at.replace(tzinfo=UTC)
        assert last == part.last_at, key
        assert Bins.decode(row.durations).encode() == part.durations.encode(), key
        assert Bins.decode(row.sizes).encode() == part.sizes.encode(), key
    stored_models = {
        (r.project_id, r.span, r.bucket if r.bucket.tzinfo else r.bucket.replace(tzinfo=UTC),
         r.model): r
        for r in db.session.scalars(sa.select(ModelRollup))
    }  # fmt: skip
    assert set(stored_models) == set(models)
    for key, part in models.items():
        row = stored_models[key]
        for name in ("service_calls", "input_tokens", "output_tokens", "cached_tokens"):
            assert getattr(row, name) == getattr(part, name), (key, name)
        assert (row.cost_nano, row.unpriced) == (part.cost_nano, part.unpriced), key
    _assert_quantiles(project_id)
    # The stored tool costs' roll-up: their sums per project, hour and tool, no row left over.
    assert tool_cost_rollup.stored() == tool_cost_rollup.recompute()


def _assert_quantiles(project_id: int) -> None:
    """Merged over all of a tool's daily rows, the sketch's quantiles are within its relative
    accuracy of the exact quantile at the same rank (DDSketch's rank: q * (n - 1))."""
    T = ToolInvocation
    rows = db.session.execute(
        sa.select(T.function_name, T.started_at, T.ended_at).where(T.project_id == project_id)
    ).all()
    exact: dict[str, list[float]] = {}
    for name, started, ended in rows:
        ms = duration_of(started, ended)
        if ms is not None:
            exact.setdefault(name, []).append(ms)
    merged: dict[str, Bins] = {}
    for r in db.session.scalars(
        sa.select(ToolRollup).where(ToolRollup.project_id == project_id, ToolRollup.span == DAY)
    ):
        merged.setdefault(r.function_name, Bins()).merge_text(r.durations)
    for name, values in exact.items():
        values.sort()
        for q in (0.0, 0.25, 0.5, 0.95, 1.0):
            want = values[math.floor(q * (len(values) - 1))]
            got = quantile(merged[name], q)
            assert got is not None
            assert abs(got - want) <= RELATIVE_ACCURACY * abs(want) + 1e-9, (name, q, got, want)


def _assert_reads(project_id: int, since_minutes: int, hours: int) -> None:
    """The pages' reads from the roll-ups give the figures the rows give, over a range that
    starts and ends inside hours (partial edges) and over all time."""
    since = BASE + timedelta(minutes=since_minutes)
    until = since + timedelta(hours=hours, minutes=17)
    for lo, hi in ((None, None), (since, until), (since, None), (None, until)):
        got = tool_stats.tool_stats(project_id, since=lo, until=hi)
        want = tool_stats.tool_stats_from_rows(project_id, since=lo, until=hi)
        assert [_comparable(s) for s in got] == [_comparable(s) for s in want], (lo, hi)
    f = ChartFilters(since.date(), until.date(), range="24h", since=since)
    assert analytics.daily_tool_activity(project_id, f) == (
        analytics.daily_tool_activity_from_rows(project_id, f)
    )
    got_usage = analytics.daily_usage(project_id, f)
    want_usage = analytics.daily_usage_from_rows(project_id, f)
    assert [(u.day, u.service_calls, u.input_tokens, u.unpriced_calls) for u in got_usage] == [
        (u.day, u.service_calls, u.input_tokens, u.unpriced_calls) for u in want_usage
    ]
    for g, w in zip(got_usage, want_usage, strict=True):
        assert abs(g.cost_usd - w.cost_usd) < Decimal("1e-6")


def _comparable(s: tool_stats.ToolStats) -> tuple:
    return (
        s.function_name,
        s.calls,
        s.errors,
        s.missing_responses,
        s.avg_response_bytes,
        s.avg_response_tokens,
        s.last_seen,
        s.p50_ms,
        s.p95_ms,
        s.timed_calls,
    )


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=ops, since_minutes=st.integers(0, 36 * 60), hours=st.integers(0, 30))
# Every path at least once, whatever the random examples draw: calls then their responses and
# usage completed, the token pass, then the conversation deleted; placeholders and a native
# message given MessageTool calls, then purged; a trace in part then whole (the projector's
# rewrite), counted, then deleted.
@example(
    [
        ("native", 0, 0, 4, False, False),
        ("native", 0, 0, 4, True, True),
        ("native", 1, 1, 3, True, False),
        ("tokens",),
        ("delete", "c0"),
    ],
    37,
    5,
)
@example(
    [("tools", 0, 2, False), ("tools", 0, 3, True), ("tools", 3, 2, True), ("purge", True)],
    0,
    30,
)
@example(
    [("otlp", 1, False), ("otlp", 2, True), ("otlp", 1, True), ("tokens",), ("delete", "o1")],
    600,
    12,
)
# The stored tool costs: stored, replaced after more writes, then their conversations deleted
# one by one and purged.
@example(
    [
        ("native", 0, 0, 4, True, False),
        ("native", 1, 1, 3, True, True),
        ("otlp", 1, True),
        ("costs",),
        ("native", 0, 1, 2, True, True),
        ("tokens",),
        ("costs",),
        ("delete", "c1"),
    ],
    0,
    30,
)
@example(
    [("native", 0, 0, 4, True, False), ("otlp", 2, True), ("costs",), ("purge", True)],
    0,
    30,
)
def test_rollups_equal_a_recomputation_after_any_writes(
    app, client, project_key, sequence, since_minutes, hours
):
    _reset(app)
    for op in sequence:
        _apply(app, client, project_key, op)
    with app.app_context():
        _assert_no_drift(project_key.project_id)
        _assert_reads(project_key.project_id, since_minutes, hours)
        db.session.rollback()


def test_a_rolled_back_write_leaves_no_delta_behind(app, client, project_key):
    """Deltas of a transaction that is rolled back are dropped with it (the next commit,
    of another write, does not write them)."""
    _apply(app, client, project_key, ("native", 0, 0, 2, True, True))
    with app.app_context():
        before = {k: (r.calls, r.errors) for k, r in _stored_tools().items()}
        from webapp.ingest import rollups

        rollups.add_calls(
            project_key.project_id,
            [
                {
                    "function_name": "phantom",
                    "created_at": BASE,
                    "is_error": False,
                    "response": None,
                    "redactions": None,
                    "response_bytes": None,
                    "response_tokens": None,
                    "started_at": None,
                    "ended_at": None,
                }
            ],
        )
        db.session.rollback()
        flush()
        db.session.commit()
        assert {k: (r.calls, r.errors) for k, r in _stored_tools().items()} == before


@pytest.mark.parametrize(
    ("since", "until"),
    [
        (None, None),
        (BASE + timedelta(minutes=37), None),
        (None, BASE + timedelta(days=2, minutes=5)),
        (BASE + timedelta(minutes=37), BASE + timedelta(minutes=50)),
        (BASE + timedelta(minutes=37), BASE + timedelta(days=3, hours=2, minutes=9)),
        (BASE, BASE + timedelta(days=1)),
    ],
)
def test_a_range_is_covered_once_by_buckets_and_edges(since, until):
    """Every minute of the range is in exactly one whole bucket or edge, none outside it."""
    whole, edges = split_range(since, until)
    start = since or BASE - timedelta(days=2)
    end = until or BASE + timedelta(days=5)
    at = start - timedelta(hours=3)
    while at < end + timedelta(hours=3):
        inside = (since is None or at >= since) and (until is None or at < until)
        hits = sum(
            1
            for span, lo, hi in whole
            if (lo is None or bucket_start(at, span) >= lo)
            and (hi is None or bucket_start(at, span) < hi)
        ) + sum(1 for lo, hi in edges if lo <= at < hi)
        assert hits == (1 if inside else 0), (at, whole, edges)
        at += timedelta(minutes=1)
    assert all(hi - lo <= timedelta(seconds=HOUR) for lo, hi in edges)
