"""The demo's numbers agree with each other as the pages show them (issue 23), with `--large`.

Every demo round 0 reported 900 input tokens, 60 output tokens and 1.40 s whatever it sent;
the context chart showed reported input 3-6 times the counted context (a 1 MB result counted
307,010 tokens in a run that reported 240,907), and the tools' attributed cost was $180 of a
$200 total against $10.80 of cost per day. Here, on the demo loaded once with its 10,000-call
conversation: each service call reports at least the context it replays, within what the
chart's caption calls framing; what the pages attribute to tools never exceeds what was billed;
and the cost per day adds up to the costs stored, per conversation and in total.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from dashboard_support import log_in
from sqlalchemy import func, select

from webapp import create_app
from webapp.analytics.conversation_charts import framing_explains
from webapp.db import db
from webapp.demo import load_demo
from webapp.demo.large import LARGE_ID
from webapp.models import Conversation, Message, Project, ServiceCall

LOADED_AT = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
# The demo's four weeks and the large conversation's day, as the period pickers give them.
PERIOD = {"from": (LOADED_AT - timedelta(days=29)).date().isoformat(), "to": "2026-03-10"}
FRAMING = "providers add a few tokens of framing per message"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: Any) -> Iterator[Any]:
    """A dashboard client on a database of its own with the demo, --large too, loaded once."""
    url = f"sqlite:///{tmp_path_factory.mktemp('demo-identities') / 'demo.db'}"
    app = create_app({"TESTING": True, "DATABASE_URL": url, "SECRET_KEY": "test"})
    with app.app_context():
        db.create_all()
    load_demo(app, "default", now=LOADED_AT, large=True)
    client = app.test_client()
    log_in(app, client)
    with app.app_context():
        project_id = db.session.scalar(select(Project.id).where(Project.name == "default"))
        conversations = dict(
            db.session.execute(
                select(Conversation.external_id, Conversation.id).where(
                    Conversation.project_id == project_id
                )
            ).all()
        )
    with client.session_transaction() as session:
        session["project_id"] = project_id
    client.application.config["DEMO_CONVERSATIONS"] = conversations
    yield client
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


def get_json(client: Any, url: str, **args: str) -> Any:
    response = client.get(url, query_string=args)
    assert response.status_code == 200, response.get_data(as_text=True)[:2000]
    return response.get_json()


def conversations(client: Any) -> dict[str, int]:
    return client.application.config["DEMO_CONVERSATIONS"]


def test_every_service_call_reports_the_context_it_replays_and_framing(demo):
    checked = 0
    for external_id, row_id in sorted(conversations(demo).items()):
        context = get_json(demo, f"/conversations/{row_id}/charts.json")["charts"]["context"]
        reported = [r for r in context["rows"] if r["reported_input_tokens"] is not None]
        for row in reported:
            where = (external_id, row["service_call"], row["total"], row["reported_input_tokens"])
            assert row["reported_input_tokens"] >= row["total"] > 0, where
            assert framing_explains(row["reported_input_tokens"], row["total"]), where
        checked += len(reported)
        # What the page says under the chart: the gap is framing (or nothing was reported).
        if reported:
            assert FRAMING in context["notes"][0], (external_id, context["notes"][0])
        else:
            assert external_id == "demo-imported-openai", external_id
            assert "no service call reported its input" in context["notes"][0]
    # 15 conversations and the 1,000 turns of the large one (2 tool rounds and an answer each).
    assert checked > 3_100


def test_the_1_mb_result_is_reported_as_sent(demo):
    row_id = conversations(demo)["demo-large-result"]
    context = get_json(demo, f"/conversations/{row_id}/charts.json")["charts"]["context"]
    with_result = context["rows"][-1]
    assert with_result["tool_results"] > 300_000
    assert with_result["tool_results"] <= with_result["total"]
    assert with_result["total"] <= with_result["reported_input_tokens"]


def test_usage_and_model_time_vary_per_round(demo):
    with demo.application.app_context():
        rows = db.session.execute(
            select(
                ServiceCall.input_tokens,
                ServiceCall.output_tokens,
                ServiceCall.cached_tokens,
                ServiceCall.started_at,
                ServiceCall.ended_at,
            )
            .join(Message, Message.id == ServiceCall.message_id)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(ServiceCall.round_index == 0, Conversation.external_id != LARGE_ID)
        ).all()
        large = db.session.execute(
            select(
                func.sum(ServiceCall.input_tokens),
                func.sum(ServiceCall.cached_tokens),
                func.max(ServiceCall.input_tokens),
            )
            .join(Message, Message.id == ServiceCall.message_id)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(Conversation.external_id == LARGE_ID)
        ).one()
    assert len(rows) > 40
    assert len({r.input_tokens for r in rows}) > len(rows) // 2
    assert len({r.output_tokens for r in rows}) > 10
    seconds = {(r.ended_at - r.started_at).total_seconds() for r in rows if r.started_at}
    assert len(seconds) > len(rows) // 2 and 1.40 not in seconds
    assert all(0.3 < s < 5 for s in seconds)
    # A context that grows to ~190,000 tokens, read mostly from the prompt cache.
    total, cached, biggest = large
    assert 150_000 < biggest < 1_000_000 and cached > total * 0.9


def test_attributed_cost_never_exceeds_what_was_billed_and_days_add_up(demo):
    costs = get_json(demo, "/costs.json", **PERIOD)["charts"]
    per_day = sum((Decimal(v) for v in _column(costs["cost"], "cost_usd")), Decimal(0))
    with demo.application.app_context():
        stored = db.session.scalar(select(func.sum(ServiceCall.cost_usd)))
    # Every demo service call falls in the four weeks: the days add up to all that is stored.
    assert per_day == Decimal(stored) > 0
    per_conversation = Decimal(0)
    for row_id in conversations(demo).values():
        turn_cost = get_json(demo, f"/conversations/{row_id}/charts.json")["charts"]["turn-cost"]
        per_conversation += sum((Decimal(v) for v in _column(turn_cost, "cost_usd")), Decimal(0))
    assert per_conversation == per_day

    for page in (costs["tool-cost"], _tools_panel(demo)):
        billed = sum((Decimal(v) for v in _column(page, "billed_cost_usd")), Decimal(0))
        estimated = sum((Decimal(v) for v in _column(page, "estimated_cost_usd")), Decimal(0))
        attributed = sum((Decimal(v) for v in _column(page, "attributed_cost_usd")), Decimal(0))
        assert 0 < billed <= per_day
        assert attributed == billed + estimated <= per_day
        # Only service calls that reported no usage are estimated: the imported conversation.
        assert estimated < per_day / 1000


def _tools_panel(client: Any) -> dict[str, Any]:
    """The tools page's chart panel (HTML only): its table as the CSV download gives it."""
    import csv
    import io

    response = client.get("/costs/tool-cost.csv", query_string=PERIOD)
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    panel = client.get("/tools/charts", query_string=PERIOD)
    assert panel.status_code == 200 and b"Which tools make the agent expensive" in panel.data
    return {"rows": rows}


def _column(chart: dict[str, Any], key: str) -> list[Any]:
    return [row[key] for row in chart["rows"] if row.get(key) not in (None, "")]
