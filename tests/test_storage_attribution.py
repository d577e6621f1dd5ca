"""The stored tool costs ("which tools make the agent expensive") stay true (issue 24).

Random sequences of every write path (the roll-ups' drift test's: native posts, MessageTool,
OTLP rewrites, deletes, purges, the token pass), with the stored attribution brought up to
date in between. After them, every conversation whose stored attribution is not reported stale
holds exactly the pieces a recomputation gives, and the chart's figures, read from the stored
pieces (and the few conversations it replays itself), equal those of the old chart, which
replayed every conversation in the period, over ranges that start on or inside an hour. On
SQLite and on PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.test_storage_rollups import (
    BASE,
    _apply,
    delete_op,
    native_op,
    otlp_op,
    purge_op,
    tokens_op,
)
from webapp.analytics.filters import ChartFilters
from webapp.analytics.tool_costs import billed_inputs, merge_attributions, tool_attribution
from webapp.db import db, utcnow
from webapp.models import Conversation, ConversationAttribution, ConversationToolCost
from webapp.pricing import PriceOverride
from webapp.queries import analytics
from webapp.services import attribution_store as store
from webapp.views import charts

# MessageTool calls to placeholders only: one added to a native message may conflict with a
# later native post of the same key (a 400 the roll-ups' sequences never draw).
tools_op = st.tuples(st.just("tools"), st.integers(0, 2), st.integers(1, 3), st.booleans())
ops = st.lists(
    st.one_of(native_op, native_op, tools_op, otlp_op, delete_op, purge_op, tokens_op),
    min_size=1,
    max_size=6,
)


def _reset(app) -> None:
    with app.app_context():
        for table in ("otel_turn_trace", "otel_turn", "otel_link", "otel_span", "otel_log"):
            db.session.execute(sa.text(f"DELETE FROM {table}"))
        # project_tool_cost too: a raw DELETE of conversations bypasses the paths that keep it.
        for table in (
            "conversation",
            "message",
            "tool_rollup",
            "model_rollup",
            "project_tool_cost",
        ):
            db.session.execute(sa.text(f"DELETE FROM {table}"))
        db.session.commit()


def _filters(since: datetime) -> ChartFilters:
    return ChartFilters(since.date(), utcnow().date(), range="24h", since=since)


def _replayed(project_id: int, f: ChartFilters, overrides: dict | None = None) -> list:
    """The old chart: every conversation active in the period replayed, then merged."""
    ids, _total = analytics.active_conversation_ids(project_id, f, 10_000)
    loaded = analytics.load_conversations(project_id, ids)
    prices = store.prices_for(overrides or {}, loaded)
    parts = [
        tool_attribution(
            store.context_of(conv),
            prices,
            billed_inputs(conv.history, conv.costs, prices),
            (f.start, f.end),
        )
        for conv in loaded
    ]
    return merge_attributions(parts)


def _stored_pieces(conversation_id: int) -> dict:
    rows = db.session.scalars(
        sa.select(ConversationToolCost).where(
            ConversationToolCost.conversation_id == conversation_id
        )
    )
    out = {}
    for r in rows:
        bucket = r.bucket if r.bucket.tzinfo else r.bucket.replace(tzinfo=UTC)
        out[(bucket, r.function_name)] = (
            r.results,
            r.result_tokens,
            r.sends,
            r.resent_input_tokens,
            r.unpriced_input_tokens,
            r.cost_femto,
            r.estimated_femto,
        )
    return out


def _assert_fresh_rows_true(project_id: int) -> None:
    """Every conversation not reported stale holds what a recomputation gives."""
    stale, _n = store.stale_conversations(project_id, None, 10_000, store.prices_key({}))
    stale_ids = {i for i, _ in stale}
    revisions = dict(
        db.session.execute(
            sa.select(Conversation.id, Conversation.revision).where(
                Conversation.project_id == project_id
            )
        ).all()
    )
    fresh = {i: r for i, r in revisions.items() if i not in stale_ids}
    for computed in store.compute(project_id, fresh, {}):
        want = {
            (hour, row["function_name"]): tuple(
                row[n] for n in (*store._SUMS, "cost_femto", "estimated_femto")
            )
            for hour, row in ((r["bucket"], r) for r in store._rows(project_id, computed))
        }
        assert _stored_pieces(computed.conversation_id) == want, computed.conversation_id


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=ops, then=ops, since_minutes=st.integers(0, 36 * 60))
@example(
    [("native", 0, 0, 4, True, False), ("native", 1, 1, 3, True, True)],
    [("native", 0, 1, 2, True, True), ("tokens",), ("delete", "c1")],
    120,
)
@example(
    [("otlp", 1, True), ("tools", 1, 2, True), ("native", 2, 0, 4, True, False)],
    [("otlp", 1, False), ("tokens",), ("purge", True)],
    37,
)
def test_stored_tool_costs_equal_a_recomputation_after_any_writes(
    app, client, project_key, first, then, since_minutes
):
    _reset(app)
    project_id = project_key.project_id
    for op in first:
        _apply(app, client, project_key, op)
    with app.app_context():
        store.refresh_stale(project_id, {})
        _assert_fresh_rows_true(project_id)
    for op in then:
        _apply(app, client, project_key, op)
    with app.app_context():
        _assert_fresh_rows_true(project_id)
        for since in (BASE + timedelta(minutes=since_minutes), BASE + timedelta(hours=3)):
            f = _filters(since)
            want = _replayed(project_id, f)
            db.session.commit()
            # Twice: the first request replays (and stores) the stale ones, the second reads them.
            for _ in range(2):
                got, notes = charts.project_attribution(project_id, {}, f)
                assert got == want, since
                assert not [n for n in notes if n.startswith(("Partial", "Approximate"))]
        db.session.rollback()


def test_a_deleted_conversation_takes_its_stored_costs_along(app, client, project_key):
    _reset(app)
    _apply(app, client, project_key, ("native", 0, 0, 4, True, False))
    with app.app_context():
        store.refresh_stale(project_key.project_id, {})
        assert db.session.scalar(sa.select(sa.func.count()).select_from(ConversationToolCost))
    _apply(app, client, project_key, ("delete", "c0"))
    with app.app_context():
        for model in (ConversationToolCost, ConversationAttribution):
            assert db.session.scalar(sa.select(sa.func.count()).select_from(model)) == 0


def test_the_chart_says_when_figures_are_pending(app, client, project_key, monkeypatch):
    """Past the bound of conversations replayed per request, the stored figures stand in and
    the chart says how many are pending; the next requests catch up."""
    _reset(app)
    for conv in range(3):
        _apply(app, client, project_key, ("native", conv, 0, 4, True, False))
    monkeypatch.setattr(store, "INLINE_MAX", 1)
    with app.app_context():
        f = _filters(BASE)
        want = _replayed(project_key.project_id, f)
        db.session.commit()
        _got, notes = charts.project_attribution(project_key.project_id, {}, f)
        assert any("Partial: 2 conversations" in n for n in notes), notes
        for _ in range(2):
            got, notes = charts.project_attribution(project_key.project_id, {}, f)
        assert got == want
        assert not [n for n in notes if n.startswith("Partial")]


def test_other_price_overrides_make_the_stored_costs_stale(app, client, project_key):
    """Costs stored with the project's former price overrides are computed again."""
    _reset(app)
    for conv in range(2):
        _apply(app, client, project_key, ("native", conv, 0, 4, True, False))
    overrides = {"gpt-4o": PriceOverride(Decimal(7), Decimal(9))}
    with app.app_context():
        store.refresh_stale(project_key.project_id, {})
        f = _filters(BASE)
        want = _replayed(project_key.project_id, f, overrides)
        assert want != _replayed(project_key.project_id, f)
        db.session.commit()
        for _ in range(2):
            got, _notes = charts.project_attribution(project_key.project_id, overrides, f)
            assert got == want
