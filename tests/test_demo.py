"""`toolscope demo`: every case the dashboard and the replay must handle is really stored, on both
databases, through the real API; loading twice changes nothing; `--reset` reloads.

The demo is loaded once per database for the case checks (a module-scoped app on a database of
its own), and again in fresh databases for the loading behaviour.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from dashboard_support import dashboard_fixture  # noqa: F401
from sqlalchemy import func, select

from webapp import create_app
from webapp.bench.server import BenchSetupError, scratch_postgres
from webapp.cli import main
from webapp.db import db
from webapp.demo import load_demo
from webapp.demo.large import LARGE_ID, large_conversation
from webapp.demo.scenarios import SCENARIOS
from webapp.models import (
    ApiKey,
    Channel,
    Conversation,
    Message,
    RedactionRule,
    ServiceCall,
    ToolDefinition,
    ToolInvocation,
)

LOADED_AT = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
PG_SERVER_URL = os.environ.get(
    "TOOLSCOPE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
TABLES = (Conversation, Message, ToolInvocation, ServiceCall, ToolDefinition, Channel)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def demo_app(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Any]:
    """An app on a database of its own with the demo loaded once (read-only for the tests)."""
    with contextlib.ExitStack() as cleanup:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}"
        else:
            try:
                url = cleanup.enter_context(scratch_postgres(PG_SERVER_URL))
            except BenchSetupError as exc:
                if os.environ.get("TOOLSCOPE_TEST_REQUIRE_PG") == "1":
                    pytest.fail(str(exc))
                pytest.skip("PostgreSQL server not reachable")
        app = create_app({"TESTING": True, "DATABASE_URL": url, "SECRET_KEY": "test"})
        with app.app_context():
            db.create_all()
        load_demo(app, "default", now=LOADED_AT)
        yield app
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


@pytest.fixture
def session(demo_app: Any) -> Iterator[Any]:
    with demo_app.app_context():
        yield db.session


def calls_of(session: Any, conversation_id: str) -> list[tuple[Message, ToolInvocation]]:
    """(message, call) pairs of a conversation, in turn, round and sequence order."""
    rows = session.execute(
        select(Message, ToolInvocation)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .join(ToolInvocation, ToolInvocation.message_id == Message.id)
        .where(Conversation.external_id == conversation_id)
        .order_by(Message.created_at, ToolInvocation.round_index, ToolInvocation.sequence_index)
    )
    return [(row.Message, row.ToolInvocation) for row in rows]


def assistant_of(session: Any, conversation_id: str, turn: int = 1) -> Message:
    return session.scalars(
        select(Message).where(Message.external_id == f"{conversation_id}-{turn}-assistant")
    ).one()


# -- what is there -------------------------------------------------------------------------------


def test_every_scenario_is_a_conversation(session):
    ids = set(session.scalars(select(Conversation.external_id)))
    assert ids == set(SCENARIOS)
    assert 12 <= len(ids) <= 16


def test_two_channels_with_their_freshness_windows(session):
    channels = dict(session.execute(select(Channel.name, Channel.freshness_seconds)).all())
    assert channels == {"support-bot": 45 * 86_400, "orders": 300, "live-dashboard": 30}
    live = session.scalars(
        select(Conversation.external_id)
        .join(Channel, Channel.id == Conversation.channel_id)
        .where(Channel.name == "live-dashboard")
    ).all()
    assert set(live) == {"demo-in-progress", "demo-live-metrics"}


def test_three_parallel_calls_overlap_in_time(session):
    calls = [call for _, call in calls_of(session, "demo-weather-parallel")]
    assert [(c.round_index, c.sequence_index) for c in calls] == [(0, 0), (0, 1), (0, 2)]
    assert all(c.started_at and c.ended_at and c.ended_at > c.started_at for c in calls)
    latest_start = max(c.started_at for c in calls)
    assert all(c.ended_at > latest_start for c in calls), "all three run at the same time"


def test_multi_round_turn_search_then_fetch_then_answer(session):
    first_turn = [
        c for m, c in calls_of(session, "demo-revenue-research") if "-1-" in m.external_id
    ]
    rounds = [(c.round_index, c.function_name) for c in first_turn]
    assert rounds == [
        (0, "internal_search"),
        (0, "internal_search"),
        (0, "web_search"),
        (1, "fetch_page"),
    ]
    assert "[source1]" in assistant_of(session, "demo-revenue-research").content


def test_search_results_are_numbered_sources_some_uncited(session):
    answer = assistant_of(session, "demo-revenue-research").content
    numbers = set()
    for _, call in calls_of(session, "demo-revenue-research"):
        if call.function_name.endswith("search"):
            items = json.loads(call.response)
            assert all(set(i) == {"source_number", "title", "url", "snippet"} for i in items)
            numbers |= {i["source_number"] for i in items}
    cited = {n for n in numbers if f"[source{n}]" in answer}
    assert cited and numbers - cited, "some sources are cited, others are not"
    # Numbering goes on across turns; the second answer cites in upper case.
    assert "[SOURCE9]" in assistant_of(session, "demo-revenue-research", turn=2).content


def test_failed_cancelled_and_in_progress_runs(session):
    statuses = {
        cid: assistant_of(session, cid).status
        for cid in ("demo-failed-run", "demo-cancelled-run", "demo-in-progress")
    }
    assert statuses == {
        "demo-failed-run": "failed",
        "demo-cancelled-run": "cancelled",
        "demo-in-progress": "in_progress",
    }
    failed = [c for _, c in calls_of(session, "demo-failed-run")]
    assert failed[-1].is_error and failed[-1].round_index == 1
    cancelled = [c for _, c in calls_of(session, "demo-cancelled-run")]
    assert [c.response is None for c in cancelled] == [False, False, True]


def test_in_progress_run_was_posted_round_by_round(session):
    calls = [c for _, c in calls_of(session, "demo-in-progress")]
    # Round 0 was posted without, then with its result; round 1 is still running.
    assert [(c.round_index, c.response is not None) for c in calls] == [
        (0, True),
        (1, False),
        (1, False),
    ]
    rounds = session.scalars(
        select(ServiceCall.round_index)
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.external_id == "demo-in-progress-1-assistant")
    ).all()
    assert sorted(rounds) == [0, 1]


def test_a_completed_run_with_a_call_without_response_and_tool_errors(session):
    calls = [c for _, c in calls_of(session, "demo-tool-errors")]
    assert assistant_of(session, "demo-tool-errors").status == "completed"
    assert [c.is_error for c in calls] == [True, False, False]
    assert calls[2].response is None and calls[2].response_created_at is None


def test_empty_and_duplicated_call_ids(session):
    ids = [c.external_tool_call_id for _, c in calls_of(session, "demo-odd-call-ids")]
    assert ids == ["", "", "call_dup", "call_dup"]


def test_stale_and_fresh_results_relative_to_the_load(session):
    def age(conversation_id: str) -> list[timedelta]:
        return [
            LOADED_AT - c.response_created_at
            for _, c in calls_of(session, conversation_id)
            if c.response_created_at
        ]

    assert all(a > timedelta(minutes=5) for a in age("demo-order-status"))
    assert all(
        timedelta(days=1) < a < timedelta(days=1, minutes=5) for a in age("demo-weather-parallel")
    )
    live = sorted(age("demo-live-metrics"))
    assert live[0] < timedelta(seconds=30) < live[1] < timedelta(minutes=5)


def replay_stats(demo_app: Any, conversation_id: str, as_of: datetime) -> dict[str, Any]:
    from webapp.auth import create_key, get_or_create_project

    with demo_app.app_context():
        key, plain = create_key(get_or_create_project("default"), "test")
        db.session.commit()
        key_id = key.id
    response = demo_app.test_client().get(
        f"/api/v1/conversations/{conversation_id}/replay",
        query_string={"as_of": as_of.isoformat()},
        headers={"Authorization": f"Bearer {plain}"},
    )
    with demo_app.app_context():  # the module's demo stays as loaded (one key)
        db.session.execute(sa.delete(ApiKey).where(ApiKey.id == key_id))
        db.session.commit()
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["stats"]


# Conversations whose point is staleness: the order status (its one result is older than the
# `orders` window) and live metrics (30 s); an in-progress run, a cancelled one and a failed one
# replay nothing of their unfinished run by design (per-run persistence).
STALE_BY_DESIGN = {"demo-order-status", "demo-live-metrics"}
NOT_REPLAYED_BY_DESIGN = {"demo-in-progress", "demo-cancelled-run", "demo-failed-run"}
SERVER_CLOCK = {"demo-sdk-message-tools"}


@pytest.mark.parametrize("days_later", [0, 14])
def test_the_demo_replays_its_calls_for_weeks_after_loading(demo_app, days_later):
    """Its replays used to say "0 / N calls replayed" five minutes after loading."""
    as_of = LOADED_AT + timedelta(days=days_later, minutes=10)
    for conversation_id in sorted(
        set(SCENARIOS) - STALE_BY_DESIGN - NOT_REPLAYED_BY_DESIGN - SERVER_CLOCK
    ):
        stats = replay_stats(demo_app, conversation_id, as_of)
        assert stats["calls_included"] > 0, (conversation_id, stats["calls_omitted"])
        assert "stale" not in stats["calls_omitted"], (conversation_id, stats)
    order = replay_stats(demo_app, "demo-order-status", as_of)
    assert order["calls_included"] == 0 and order["calls_omitted"] == {"stale": 1}
    # The MessageTool API takes no timestamps: those calls carry the server's clock.
    sdk = replay_stats(
        demo_app, "demo-sdk-message-tools", datetime.now(UTC) + timedelta(days=days_later)
    )
    assert sdk["calls_included"] > 0 and not sdk["calls_omitted"]


def test_the_demo_spans_four_weeks(session):
    days = {m.created_at.date() for m in session.scalars(select(Message)) if m.role == "assistant"}
    assert len(days) >= 20
    assert (max(days) - min(days)).days >= 26


def test_token_counts_fit_the_models_context_windows(session):
    from webapp.analytics.windows import context_window

    for sc in session.scalars(select(ServiceCall)):
        window = context_window(sc.model, sc.provider)
        assert window is not None, sc.model
        assert (sc.input_tokens or 0) + (sc.output_tokens or 0) <= window.tokens, (
            sc.model,
            sc.input_tokens,
        )


def test_a_demo_older_than_a_day_is_re_timed_when_asked(app):
    load_demo(app, "default", now=LOADED_AT)
    before = row_counts(app)
    later = LOADED_AT + timedelta(days=3)
    same_day = load_demo(
        app, "default", now=LOADED_AT + timedelta(hours=2), refresh_after=timedelta(days=1)
    )
    assert same_day.refreshed_from is None and same_day.deleted == 0
    report = load_demo(app, "default", now=later, refresh_after=timedelta(days=1))
    assert report.refreshed_from == LOADED_AT and report.loaded_at == later
    assert report.deleted == len(SCENARIOS)
    assert row_counts(app) == before


def test_a_very_large_result_under_the_limit(demo_app, session):
    ((_, call),) = calls_of(session, "demo-large-result")
    size = len(call.response.encode())
    assert 900_000 < size < demo_app.config["MAX_RESULT_BYTES"]
    assert json.loads(call.response)["rows"][0]["customer"] == "customer-00000"
    assert call.response_tokens and call.response_tokens > 100_000


def test_usage_per_service_call_with_real_model_names(session):
    models = set(session.scalars(select(ServiceCall.model)))
    assert {"gpt-4o", "gpt-4o-mini", "gpt-4.1"} <= models
    assert any(m.startswith("claude-sonnet-4") for m in models)
    priced = session.scalar(
        select(func.count()).select_from(ServiceCall).where(ServiceCall.cost_usd.is_not(None))
    )
    assert priced == session.scalar(select(func.count()).select_from(ServiceCall))


def test_tool_definitions_system_prompts_and_token_counts(session):
    for conversation in session.scalars(select(Conversation)):
        assert conversation.system_prompt, conversation.external_id
        defined = session.scalar(
            select(func.count())
            .select_from(ToolDefinition)
            .where(ToolDefinition.conversation_id == conversation.id)
        )
        assert defined >= 1, conversation.external_id
    missing = session.scalar(
        select(func.count())
        .select_from(ToolInvocation)
        .where(ToolInvocation.arguments_tokens.is_(None))
    )
    assert missing == 0


def test_html_looking_content_is_stored_verbatim(session):
    conversation = session.scalars(
        select(Conversation).where(Conversation.external_id == "demo-xss-probe")
    ).one()
    assert conversation.title.startswith("<script>alert(1)</script>")
    ((_, call),) = calls_of(session, "demo-xss-probe")
    assert call.arguments["query"] == "<script>alert(1)</script>"
    assert "<script>" in call.response


def test_message_tools_placeholder_was_attached(session):
    message = session.scalars(
        select(Message).where(Message.external_id == "demo-sdk-message-tools-1-assistant")
    ).one()
    assert message.conversation_id is not None and message.content.startswith("12 public")
    names = [c.function_name for _, c in calls_of(session, "demo-sdk-message-tools")]
    assert names == ["internal_search", "get_weather"]
    orphans = select(func.count()).select_from(Message).where(Message.conversation_id.is_(None))
    assert session.scalar(orphans) == 0


def test_imported_openai_conversation(session):
    calls = [c for _, c in calls_of(session, "demo-imported-openai")]
    assert [(c.round_index, c.sequence_index, c.external_tool_call_id) for c in calls] == [
        (0, 0, "call_eur_chf"),
        (0, 1, "call_eur_usd"),
    ]


def test_redaction_masked_pii_and_skipped_the_vault(session):
    calls = [c for _, c in calls_of(session, "demo-crm-redaction")]
    assert [c.function_name for c in calls] == ["crm_lookup"]  # vault_read never stored
    stored = json.dumps(calls[0].arguments) + calls[0].response
    for secret in ("jane.doe@example.com", "4111 1111 1111 1111", "sk-live-51HxDemoKey"):
        assert secret not in stored
    assert calls[0].redactions == ["demo: mask PII in CRM calls"]
    assert session.scalar(select(func.count()).select_from(RedactionRule)) == 2


def test_the_loader_key_is_gone_and_one_key_was_made(session):
    assert [k.name for k in session.scalars(select(ApiKey))] == ["demo"]


# -- loading behaviour ---------------------------------------------------------------------------


def row_counts(app: Any) -> dict[str, int]:
    with app.app_context():
        return {
            model.__tablename__: db.session.scalar(select(func.count()).select_from(model))
            for model in TABLES
        }


def test_loading_twice_changes_nothing(app):
    first = load_demo(app, "default", now=LOADED_AT)
    before = row_counts(app)
    second = load_demo(app, "default")  # no `now`: the first load's time is reused

    assert sorted(first.loaded) == sorted(SCENARIOS) and first.unchanged == []
    assert second.loaded == [] and sorted(second.unchanged) == sorted(SCENARIOS)
    assert second.loaded_at == LOADED_AT
    assert row_counts(app) == before


def test_an_interrupted_load_is_completed(app):
    load_demo(app, "default", now=LOADED_AT)
    before = row_counts(app)
    with app.app_context():
        db.session.execute(
            sa.delete(Message).where(Message.external_id == "demo-revenue-research-2-assistant")
        )
        db.session.commit()

    load_demo(app, "default")

    assert row_counts(app) == before


def test_reset_reloads_relative_to_now(app):
    load_demo(app, "default", now=LOADED_AT)
    before = row_counts(app)
    later = LOADED_AT + timedelta(days=1)

    report = load_demo(app, "default", reset=True, now=later)

    assert report.deleted == len(SCENARIOS) and sorted(report.loaded) == sorted(SCENARIOS)
    assert row_counts(app) == before
    with app.app_context():
        newest = db.session.scalar(select(func.max(Message.created_at)))
    assert later - timedelta(minutes=1) < newest <= later


def last_activity(app: Any) -> dict[str, datetime]:
    with app.app_context():
        rows = db.session.execute(select(Conversation.external_id, Conversation.updated_at))
        return dict(rows.all())  # type: ignore[arg-type]


def listed(dashboard: Any) -> list[str]:
    """The conversation list as the dashboard orders it (its JSON twin, one page)."""
    answer = dashboard.get("/conversations.json?limit=100").get_json()
    return [c["external_id"] for c in answer["data"]]


def own_conversation(app: Any, project_id: int, external_id: str, at: datetime) -> None:
    import factories as f

    with app.app_context():
        conversation = f.conversation(project_id, external_id, title="My own", at=at)
        f.message(conversation, f"{external_id}-u1", "user", "My own question", at=at)
        db.session.commit()


def test_loading_again_leaves_the_demo_s_last_activity_where_it_was(app, project_key, dashboard):
    """`make run` runs `toolscope demo` at every start: each load set the last activity of the
    15 demo conversations to that moment, so the user's own sank below them. A recent demo is
    not moved, its last activity is its own last message or call, and the user's conversation
    added in between stays first."""
    now = datetime.now(UTC)
    load_demo(app, "default", now=now, refresh_after=timedelta(days=1))
    first = last_activity(app)
    # The demo's own times, not the moment of loading.
    assert all(at <= now for at in first.values()), first
    assert max(first.values()) - min(first.values()) > timedelta(days=26)
    own_conversation(app, project_key.project_id, "my-own", datetime.now(UTC))
    again = load_demo(app, "default", now=now + timedelta(hours=3), refresh_after=timedelta(days=1))
    assert again.refreshed_from is None and again.deleted == 0

    after = last_activity(app)
    assert {k: v for k, v in after.items() if k != "my-own"} == first
    order = listed(dashboard)
    assert order[0] == "my-own"
    assert order[1:] == sorted(first, key=lambda k: first[k], reverse=True)


def test_a_re_timed_demo_stays_below_the_project_s_own_conversations(app, project_key, dashboard):
    """Re-timed relative to now, the demo's newest conversations would be later than the user's
    own: its last activity goes just below their earliest, in the demo's own order."""
    load_demo(app, "default", now=LOADED_AT)
    start = datetime.now(UTC) - timedelta(hours=5)
    own_conversation(app, project_key.project_id, "my-older", start)
    own_conversation(app, project_key.project_id, "my-newer", start + timedelta(hours=1))
    later = datetime.now(UTC)
    report = load_demo(app, "default", now=later, refresh_after=timedelta(days=1))
    assert report.refreshed_from == LOADED_AT

    after = last_activity(app)
    demo = {k: v for k, v in after.items() if not k.startswith("my-")}
    assert max(demo.values()) < after["my-older"]
    order = listed(dashboard)
    assert order[:2] == ["my-newer", "my-older"]
    assert set(order[2:]) == set(demo)
    # The demo itself was re-timed (its messages are relative to the new load), and its newest
    # conversation is still first among its own.
    with app.app_context():
        newest = db.session.scalar(select(func.max(Message.created_at)))
        newest_demo = db.session.scalar(
            select(Conversation.external_id)
            .join(Message, Message.conversation_id == Conversation.id)
            .order_by(Message.created_at.desc())
            .limit(1)
        )
    assert later - timedelta(minutes=1) < newest <= later
    assert order[2] == newest_demo


def test_cli_prints_a_key_only_when_the_project_has_none(app, runner):
    first = runner.invoke(main, args=["demo"])
    assert first.exit_code == 0, first.output
    assert f"{len(SCENARIOS)} conversations loaded" in first.output
    keys = [word for word in first.output.split() if word.startswith("ts_")]
    assert len(keys) == 1

    second = runner.invoke(main, args=["demo"])
    assert second.exit_code == 0, second.output
    assert f"0 conversations loaded, {len(SCENARIOS)} already there" in second.output
    assert "ts_" not in second.output
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(ApiKey)) == 1


def test_large_conversation_has_10000_calls_in_1000_turns():
    scenario = large_conversation(LOADED_AT)
    turns = [r for r in scenario.requests if r.path.endswith("/turns")]
    calls = [
        (r.body["assistant"]["id"], index, call["sequence_index"])
        for r in turns
        for index, round_ in enumerate(r.body["assistant"]["rounds"])
        for call in round_["calls"]
    ]
    assert scenario.conversation_id == LARGE_ID
    assert len(turns) == 1_000 and len(calls) == 10_000 and len(set(calls)) == 10_000
    assert max(sum(len(x["calls"]) for x in r.body["assistant"]["rounds"]) for r in turns) <= 50


def test_the_cost_numbers_agree_with_each_other(session):
    """Issue 23: on the demo the tool attribution said $180 of a $200 total while the cost per
    day summed to $10.80. For the same period: the cost per day adds up to the conversations'
    stored costs, and the tools' share of billed cost never exceeds what was billed (what is
    estimated at list price is only for service calls that reported no billed usage)."""
    from decimal import Decimal

    from webapp.analytics.filters import parse_filters
    from webapp.models import Project
    from webapp.views import charts

    project_id = session.scalar(select(Project.id).where(Project.name == "default"))
    period = parse_filters({}, LOADED_AT.date())  # the default: the last 30 days
    found = charts.project_charts_for(project_id, {}, period, ("cost", "tool-cost"))
    per_day = sum(Decimal(v or 0) for v in found["cost"].table.column("cost_usd"))
    conversations = session.scalars(
        select(Conversation.id).where(Conversation.project_id == project_id)
    ).all()
    per_conversation = Decimal(0)
    for cid in conversations:
        got = charts.conversation_charts_for(
            project_id, {}, cid, charts.conversation_options({}), ("turn-cost",)
        )
        assert got is not None
        per_conversation += sum(
            Decimal(v) for v in got.charts["turn-cost"].table.column("cost_usd")
        )
    stored = session.scalar(select(func.sum(ServiceCall.cost_usd)))
    assert per_day == per_conversation == Decimal(stored) > 0
    tools = found["tool-cost"].table
    billed = sum(tools.column("billed_cost_usd"), Decimal(0))
    estimated = sum(tools.column("estimated_cost_usd"), Decimal(0))
    assert 0 < billed <= per_day
    assert sum(tools.column("attributed_cost_usd"), Decimal(0)) == billed + estimated
    # Estimates only come from service calls without billed usage: a small part here.
    assert estimated < per_day / 100
