"""Rounds in full: what the model said and reasoned in each service call, its latency and cost,
each call's share of that cost, and the waterfall's model bars between the tool calls."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from dashboard_support import dashboard_fixture, page  # noqa: F401
from sqlalchemy import select

from webapp.db import db
from webapp.models import Conversation
from webapp.queries.records import CallRecord, ServiceCallRecord
from webapp.views.conversations import gantt
from webapp.views.conversations.timeline_model import CallView, cost_shares

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def at(ms: float) -> str:
    return (T0 + timedelta(milliseconds=ms)).isoformat()


def moment(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def record(round_index, seq, *, requested, start, end, args_tokens=10) -> CallRecord:
    return CallRecord(
        id=round_index * 10 + seq + 1,
        message_id=1,
        round_index=round_index,
        sequence_index=seq,
        external_tool_call_id=f"c{round_index}{seq}",
        function_name=f"tool_{seq}",
        arguments={"q": "x"},
        created_at=moment(requested),
        started_at=moment(start),
        ended_at=moment(end),
        has_response=True,
        response_created_at=moment(end),
        is_error=False,
        redactions=(),
        arguments_tokens=args_tokens,
        response_tokens=5,
        response_bytes=20,
        list_response=None,
    )


def usage(round_index, start=None, end=None, cost=None) -> ServiceCallRecord:
    return ServiceCallRecord(
        message_id=1,
        round_index=round_index,
        model="gpt-4o",
        input_tokens=100,
        output_tokens=20,
        cached_tokens=0,
        cost_usd=cost,
        started_at=moment(start) if start is not None else None,
        ended_at=moment(end) if end is not None else None,
    )


def test_model_bars_sit_between_the_tool_calls_and_the_totals_split_the_run():
    calls = [
        record(0, 0, requested=1000, start=1010, end=1400),
        record(0, 1, requested=1000, start=1020, end=1300),  # parallel: counted once
        record(1, 0, requested=2600, start=2610, end=2800),
    ]
    # Round 0 and the final answer (round 2) timed by the agent; round 1 inferred from the gap.
    timing = gantt.run_timing(calls, {0: usage(0, 0, 1000), 2: usage(2, 2800, 3500)})
    model, *rounds = timing.figure["data"]
    assert model["name"] == "model (LLM call)"
    assert model["y"] == ["0. model", "1. model (inferred)", "2. model"]
    assert model["base"] == [0.0, 1400.0, 2800.0]
    assert model["x"] == [1000.0, 1200.0, 700.0]
    assert model["marker"]["pattern"]["shape"] == ["", "/", ""]
    assert len(rounds) == 2
    assert timing.model_ms == 2900.0
    assert timing.tool_ms == 390.0 + 190.0
    assert timing.inferred


def test_nothing_is_inferred_without_a_gap_or_before_the_first_round():
    calls = [
        record(0, 0, requested=0, start=10, end=500),
        record(1, 0, requested=400, start=510, end=600),  # requested before round 0 ended
    ]
    timing = gantt.run_timing(calls, None)
    assert [t["name"] for t in timing.figure["data"]] == ["round 0", "round 1"]
    assert timing.model_ms is None and not timing.inferred


def test_each_call_takes_its_share_of_the_round_cost_by_argument_tokens():
    views = [
        CallView(record(0, s, requested=0, start=0, end=1, args_tokens=n), "", [], 1.0)
        for s, n in enumerate((30, 10))
    ]
    shared = cost_shares(views, Decimal("0.004"))
    assert [v.cost_share for v in shared] == [0.75, 0.25]
    assert [v.cost_usd for v in shared] == [Decimal("0.003"), Decimal("0.001")]
    # No token counts: equal shares. No cost: no shares.
    untokened = [
        CallView(record(0, s, requested=0, start=0, end=1, args_tokens=None), "", [], 1.0)
        for s in range(4)
    ]
    assert [v.cost_share for v in cost_shares(untokened, Decimal("1"))] == [0.25] * 4
    assert cost_shares(views, None)[0].cost_share is None


def turn_with_round_text(client, key) -> None:
    response = client.post(
        "/api/v1/conversations/r1/turns",
        json={
            "user": {"id": "u1", "content": "Find the invoice", "created_at": at(0)},
            "assistant": {
                "id": "a1",
                "model": "gpt-4o",
                "content": "Invoice 118 is paid.",
                "created_at": at(1),
                "rounds": [
                    {
                        "usage": {
                            "model": "gpt-4o",
                            "input_tokens": 1200,
                            "output_tokens": 80,
                            "started_at": at(10),
                            "ended_at": at(1210),
                            "content": "Let me look it up <script>alert(1)</script>.",
                            "reasoning": "The invoice number is in the question.",
                        },
                        "calls": [
                            {
                                "id": "c1",
                                "name": "lookup_invoice",
                                "arguments": {"number": "2026-118", "fields": ["status"]},
                                "created_at": at(1210),
                                "started_at": at(1220),
                                "ended_at": at(1500),
                                "response": {"content": "paid", "created_at": at(1500)},
                            },
                            {
                                "id": "c2",
                                "name": "ping",
                                "arguments": {},
                                "created_at": at(1210),
                                "started_at": at(1230),
                                "ended_at": at(1300),
                                "response": {"content": "ok", "created_at": at(1300)},
                            },
                        ],
                    }
                ],
            },
        },
        headers=key.headers,
    )
    assert response.status_code == 201, response.get_json()


def test_a_round_shows_what_the_model_said_its_latency_cost_and_call_shares(
    app, client, dashboard, project_key
):
    turn_with_round_text(client, project_key)
    with app.app_context():
        row_id = db.session.scalar(select(Conversation.id).where(Conversation.external_id == "r1"))
    doc = page(dashboard.get(f"/conversations/{row_id}"))
    round_ = doc.one(".round")
    said = round_.one(".round-text").text
    assert "Let me look it up <script>alert(1)</script>." in said  # text, escaped
    assert not doc.select(".round-text script")
    assert "The invoice number is in the question." in round_.one(".round-reasoning").text
    assert round_.one(".round-latency").text == "1.20 s"
    assert round_.one(".round-cost").text.startswith("$0.0")
    shares = [s.text for s in round_.select(".call-share")]
    assert len(shares) == 2 and all(s.endswith("% of cost") for s in shares)
    assert sum(int(s.split("%")[0]) for s in shares) in (99, 100, 101)
    run_summary = doc.one(".waterfall summary").text
    assert "model 1.20 s" in run_summary and "tools 280 ms" in run_summary
    # The JSON twin carries the round's text and times.
    twin = dashboard.get(f"/conversations/{row_id}.json").get_json()
    assistant = next(m for m in twin["messages"] if m["message"]["role"] == "assistant")
    used = assistant["run"]["rounds"][0]["usage"]
    assert used["content"].startswith("Let me look it up")
    assert used["reasoning"] == "The invoice number is in the question."
    assert assistant["run"]["rounds"][0]["calls"][0]["cost_share"] is not None


def test_round_text_is_optional_and_documented_in_openapi(client):
    spec = client.get("/api/openapi.json").get_json()
    text = json.dumps(spec)
    assert "What the model said in this service call" in text
    assert "The model's reasoning for this service call" in text


def test_model_bar_tooltips_say_how_long_the_call_lasts():
    """Issue 23: plotly's %{x} is where a bar with a base ends; the tooltip reads the length."""
    calls = [record(1, 0, requested=2600, start=2610, end=2800)]
    timing = gantt.run_timing(calls, {0: usage(0, 1440, 2390)})
    model = timing.figure["data"][0]
    assert model["x"] == [950.0] and model["customdata"] == [["gpt-4o", 950.0]]
    assert "lasts %{customdata[1]:.0f} ms" in model["hovertemplate"]
    assert "%{x" not in model["hovertemplate"]


def test_a_failed_call_has_the_same_share_of_its_round_cost_in_the_errors_only_view(
    app, client, dashboard, project_key
):
    """Issue 23: "Errors only" showed a failed call as 100% of its round's cost (33% in the
    full view): the share is of the whole round, whichever of its calls a view shows."""
    calls = [
        {
            "id": f"c{n}",
            "name": "lookup",
            "arguments": {"n": n},
            "response": {"content": "boom" if n == 1 else "ok", "is_error": n == 1},
        }
        for n in range(3)
    ]
    turn = {
        "user": {"id": "u1", "content": "Look them up", "created_at": at(0)},
        "assistant": {
            "id": "a1",
            "model": "gpt-4o",
            "content": "Two of three found.",
            "created_at": at(1),
            "rounds": [
                {"usage": {"model": "gpt-4o", "input_tokens": 900, "output_tokens": 60}},
                {"usage": {"model": "gpt-4o", "input_tokens": 990, "output_tokens": 30}},
            ],
        },
    }
    turn["assistant"]["rounds"][0]["calls"] = calls
    response = client.post("/api/v1/conversations/r3/turns", json=turn, headers=project_key.headers)
    assert response.status_code == 201, response.get_json()
    with app.app_context():
        row_id = db.session.scalar(select(Conversation.id).where(Conversation.external_id == "r3"))

    def shares(view: str) -> dict[str, tuple[float, str]]:
        twin = dashboard.get(f"/conversations/{row_id}.json{view}").get_json()
        run = next(m for m in twin["messages"] if m["message"]["role"] == "assistant")["run"]
        return {
            c["call"]["external_tool_call_id"]: (c["cost_share"], c["cost_usd"])
            for r in run["rounds"]
            for c in r["calls"]
        }

    full, errors = shares(""), shares("?view=errors")
    assert set(errors) == {"c1"}
    assert errors["c1"] == full["c1"]
    assert sum(share for share, _ in full.values()) == pytest.approx(1)
    doc = page(dashboard.get(f"/conversations/{row_id}?view=errors"))
    (share,) = [s.text for s in doc.select(".call-share")]
    assert share == f"{full['c1'][0] * 100:.0f}% of cost" and share != "100% of cost"
