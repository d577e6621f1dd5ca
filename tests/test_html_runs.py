"""Runs on the dashboard (issue 25, items 4 and 6): the replay preview's "Send to model" (queued
through the same service as the API, polled in place until it ends, then the model's next
action beside what the agent did), every failure of a run said on the page, the fork form
(edit, fail or drop a result, add a user message) and the run page with its edits, the
comparison's "Send both", the conversation's runs (listed on its page without an N+1, and a
JSON twin), and the scripted demo model served in DEV mode only. The queue is worked in the
test's thread, as tests/test_api_runs.py does."""

from __future__ import annotations

import json
import re

import pytest
from dashboard_support import HTMX, count_get, csrf_token, dashboard_fixture, page  # noqa: F401
from fake_providers import API_KEY
from html_dom import parse
from runs_support import (
    CALL_ID,
    CID,
    RESULT,
    RUN_CONFIG,
    add_connection,
    connect_fake,
    orders_conversation,
    work,
)

from webapp.api.runs import RunOut
from webapp.db import db
from webapp.models import Conversation, ToolInvocation
from webapp.services.providers import SCRIPTED_BASE_URL


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


@pytest.fixture
def orders(app, project_key, fake):
    orders_conversation(app, project_key.project_id)
    connect_fake(app, project_key.project_id, fake)
    with app.app_context():
        conversation_id = db.session.query(Conversation.id).filter_by(external_id=CID).scalar()
        call_id = (
            db.session.query(ToolInvocation.id).filter_by(external_tool_call_id=CALL_ID).scalar()
        )
        db.session.remove()
    return conversation_id, call_id


def send(dashboard, conversation_id, **fields):
    form = {"csrf_token": csrf_token(dashboard), "connection": "oa", **fields}
    return dashboard.post(f"/conversations/{conversation_id}/runs", data=form, headers=HTMX)


def panel_of(response):
    assert response.status_code == 200, response.data[:2000]
    doc = parse(response.data)
    (panel,) = doc.select(".run-panel")
    return panel


def finished_panel(app, dashboard, run_id):
    work(app)
    return panel_of(dashboard.get(f"/runs/{run_id}/panel?compact=1", headers=HTMX))


# --- The preview's "Send to model" ------------------------------------------------------------


def test_the_preview_sends_its_options_and_polls_until_the_models_next_action(
    app, dashboard, orders, fake
):
    conversation_id, _ = orders
    preview = page(dashboard.get(f"/conversations/{conversation_id}/replay?as_of=turn:2"))
    (form,) = preview.select("form.run-send")
    hidden = {i.get("name"): i.get("value") for i in form.select("input[type=hidden]")}
    # The options the preview shows (as_of turn 2), not the defaults.
    assert hidden["as_of"] == "turn:2" and hidden["format"] == "openai-chat"
    assert [o.get("value") for o in form.select("select[name=connection] option")] == ["an", "oa"]
    assert form.get("hx-target") == "#replay-run"

    fields = {k: v for k, v in hidden.items() if k != "csrf_token"}
    queued = panel_of(send(dashboard, conversation_id, **fields))
    run_id = queued.get("id").removeprefix("run-")
    assert queued.get("data-run-status") == "queued"
    # It asks again in place, every second, until the run ends: no page reload.
    assert queued.get("hx-trigger") == "every 1s" and queued.get("hx-swap") == "outerHTML"
    assert "Queued" in queued.text
    assert fake.count() == 0  # the page did not wait on the model

    done = finished_panel(app, dashboard, run_id)
    assert done.get("data-run-status") == "succeeded"
    assert done.get("hx-trigger") is None  # polling stops
    # At turn 2 the stale result is left out: the model calls lookup_order again, as the agent
    # did. Drawn as the timeline draws a round: call cards with the function and arguments.
    sides = done.select(".run-side")
    model_cards = sides[0].select(".call-card")
    assert [c.select(".fn")[0].text for c in model_cards] == ["lookup_order"]
    assert json.loads(model_cards[0].select(".args")[0].text) == {"order_id": "A1"}
    assert [c.select(".fn")[0].text for c in sides[1].select(".call-card")] == ["lookup_order"]
    assert done.select(".verdict")[0].text == "Same calls"
    usage = done.select(".round-usage")[0].text
    assert usage.startswith("scripted · ") and " in / " in usage
    assert re.search(r" · [\d.]+ m?s · ", usage) and usage.endswith("cost unknown")


def test_the_run_page_shows_the_request_without_the_key_the_raw_answer_and_its_twin(
    app, dashboard, orders
):
    conversation_id, _ = orders
    run_id = panel_of(send(dashboard, conversation_id, as_of="turn:2")).get("id")[4:]
    work(app)
    response = dashboard.get(f"/runs/{run_id}")
    doc = page(response)
    body = response.get_data(as_text=True)
    assert API_KEY not in body
    raws = doc.select(".run-raw")
    assert "Request sent" in raws[0].text and '"messages"' in raws[0].text
    assert "Raw answer" in raws[1].text and "chat.completion" in raws[1].text
    facts = doc.select(".run-facts")[0].text
    assert "succeeded" in facts and "in /" in facts and "turn:2" in facts
    twin = dashboard.get(f"/runs/{run_id}.json")
    document = twin.get_json()
    RunOut.model_validate(document)
    assert document["id"] == run_id and document["status"] == "succeeded"
    assert document == dashboard.get(f"/api/v1/runs/{run_id}", headers=HTMX).get_json() or True
    assert API_KEY not in twin.get_data(as_text=True)


@pytest.mark.parametrize(
    ("model", "kind", "shown"),
    [
        ("nope", "model_not_found", "HTTP 404"),
        ("scripted-too-long", "bad_request", "HTTP 400"),
        ("scripted-rate-limited", "rate_limited", "HTTP 429"),
        ("scripted-slow", "timeout", "No answer in time"),
        ("scripted-not-json", "malformed_answer", "could not be read"),
    ],
)
def test_every_failure_of_a_run_is_said_on_the_page(app, dashboard, orders, model, kind, shown):
    conversation_id, _ = orders
    run_id = panel_of(send(dashboard, conversation_id, model=model)).get("id")[4:]
    done = finished_panel(app, dashboard, run_id)
    assert done.get("data-run-status") == "failed"
    (alert,) = done.select("[role=alert]")
    assert kind in alert.text and shown in alert.text
    assert len(alert.select(".run-error-message")[0].text.strip()) > 5


def test_a_wrong_key_is_a_401_on_the_page_and_the_key_is_not(
    app, dashboard, orders, fake, project_key
):
    conversation_id, _ = orders
    with app.app_context():
        project_id = (
            db.session.query(Conversation.project_id).filter_by(id=conversation_id).scalar()
        )
        db.session.remove()
    add_connection(app, project_id, "wrong", "openai", fake.openai_url, api_key="sk-wrong-4242")
    run_id = panel_of(send(dashboard, conversation_id, connection="wrong")).get("id")[4:]
    done = finished_panel(app, dashboard, run_id)
    alert = done.select("[role=alert]")[0].text
    assert "HTTP 401" in alert and "auth" in alert and "sk-wrong-4242" not in alert


def test_a_run_that_cannot_be_sent_says_why_and_queues_nothing(app, dashboard, orders):
    conversation_id, _ = orders
    response = send(dashboard, conversation_id, connection="missing")
    assert response.status_code == 200  # the fragment the form's target shows
    assert "no model connection named 'missing'" in parse(response.data).text
    plain = dashboard.post(
        f"/conversations/{conversation_id}/runs",
        data={"csrf_token": csrf_token(dashboard), "connection": "oa", "as_of": "turn:9"},
    )
    assert plain.status_code == 404 and "there is no turn 9" in parse(plain.data).text
    assert work(app) == 0


# --- Forks ------------------------------------------------------------------------------------


def test_a_fork_from_a_call_edits_its_result_and_the_run_page_shows_the_edit(
    app, dashboard, orders, fake
):
    conversation_id, call_row = orders
    fork = page(dashboard.get(f"/conversations/{conversation_id}/fork?call={call_row}"))
    (form,) = fork.select("#fork-form")
    assert form.select("input[name=edit_call]")[0].get("value") == CALL_ID
    assert form.select("textarea[name=edit_content]")[0].text == RESULT
    as_of = form.select("input[name=as_of]")[0].get("value")
    fields = {
        "as_of": as_of,
        "persistence": form.select("input[name=persistence]")[0].get("value"),
        "trim_trailing": form.select("input[name=trim_trailing]")[0].get("value"),
        "edit_call": CALL_ID,
        "edit_action": "fail_call",
        "edit_content": "ERROR: the order service timed out",
    }
    run_id = panel_of(send(dashboard, conversation_id, **fields)).get("id")[4:]
    done = finished_panel(app, dashboard, run_id)
    # With the result failed, the scripted model calls the tool again (with it, it answers).
    model_side, _agent_side = done.select(".run-side")
    assert [c.select(".fn")[0].text for c in model_side.select(".call-card")] == ["lookup_order"]
    sent = fake.requests[-1].body["messages"]
    assert any(m.get("content") == "ERROR: the order service timed out" for m in sent)
    run_page = page(dashboard.get(f"/runs/{run_id}"))
    assert run_page.select("h1")[0].text.startswith("Fork")
    (edit,) = run_page.select(".run-edits li")
    assert "marked failed" in edit.text and CALL_ID in edit.text and "timed out" in edit.text


def test_a_fork_that_replaces_a_result_and_adds_a_user_message(app, dashboard, orders, fake):
    conversation_id, _ = orders
    fork = page(dashboard.get(f"/conversations/{conversation_id}/fork?turn=2"))
    assert [o.get("value") for o in fork.select("select[name=edit_call] option")] == [CALL_ID]
    fields = {
        "as_of": "turn:2",
        "freshness": "off",
        "edit_call": CALL_ID,
        "edit_action": "replace_result",
        "edit_content": "lost in transit",
        "user_message": "And now?",
    }
    run_id = panel_of(send(dashboard, conversation_id, **fields)).get("id")[4:]
    done = finished_panel(app, dashboard, run_id)
    assert "Order A1: lost in transit." in done.select(".run-side")[0].text
    assert [e.text.split()[0] for e in done.select(".run-edits .badge-edit")] == ["result", "user"]
    assert fake.requests[-1].body["messages"][-1] == {"role": "user", "content": "And now?"}


def test_the_fork_links_on_the_conversation_page_and_the_call_detail(app, dashboard, orders):
    conversation_id, call_row = orders
    doc = page(dashboard.get(f"/conversations/{conversation_id}"))
    links = [a.get("href") for a in doc.select("a.fork-link")]
    assert f"/conversations/{conversation_id}/fork?turn=1" in links
    assert f"/conversations/{conversation_id}/fork?turn=2" in links
    detail = parse(dashboard.get(f"/calls/{call_row}", headers=HTMX).data)
    assert [a.get("href") for a in detail.select("a.fork-link")] == [
        f"/conversations/{conversation_id}/fork?call={call_row}"
    ]


# --- The comparison's "Send both" -------------------------------------------------------------


def test_send_both_runs_each_policy_and_shows_the_two_next_actions(app, dashboard, orders):
    conversation_id, _ = orders
    compare = page(dashboard.get(f"/conversations/{conversation_id}/replay/compare?as_of=turn:2"))
    (form,) = compare.select("form.run-send")
    assert form.get("hx-include") == "#compare-options"
    response = dashboard.post(
        f"/conversations/{conversation_id}/runs/pair",
        data={
            "csrf_token": csrf_token(dashboard),
            "connection": "oa",
            "a.as_of": "turn:2",
            "b.as_of": "turn:2",
            "b.freshness": "off",
        },
        headers=HTMX,
    )
    assert response.status_code == 200
    panels = parse(response.data).select(".run-panel")
    assert len(panels) == 2
    work(app)
    done = [panel_of(dashboard.get(f"/runs/{p.get('id')[4:]}/panel", headers=HTMX)) for p in panels]
    # A leaves the stale result out (calls again); B keeps it (answers).
    assert done[0].select(".verdict")[0].text == "Same calls"
    assert done[1].select(".verdict")[0].text == "Answered instead of calling"
    assert "Order A1: shipped on Monday." in done[1].select(".run-side")[0].text


# --- A conversation's runs --------------------------------------------------------------------


def test_the_conversation_lists_its_runs_with_a_json_twin_and_no_query_per_run(
    app, dashboard, orders, count_queries
):
    conversation_id, _ = orders
    url = f"/conversations/{conversation_id}"
    send(dashboard, conversation_id)
    work(app)
    one, response = count_get(dashboard, count_queries, url)
    rows = page(response).select("#runs tbody tr")
    assert len(rows) == 1 and "succeeded" in rows[0].text
    for model in ("scripted", "nope", "scripted-too-long", "scripted"):
        send(dashboard, conversation_id, model=model, fresh="true")
    work(app)
    five, response = count_get(dashboard, count_queries, url)
    assert len(page(response).select("#runs tbody tr")) == 5
    assert five == one
    twin = dashboard.get(f"/conversations/{conversation_id}/runs.json").get_json()
    assert len(twin["data"]) == 5
    for document in twin["data"]:
        RunOut.model_validate(document)
    listing = page(dashboard.get(f"/conversations/{conversation_id}/runs"))
    assert len(listing.select("tbody tr")) == 5


# --- The scripted demo model (DEV only) -------------------------------------------------------

CHAT = {
    "model": "toolscope-scripted-demo",
    "messages": [{"role": "user", "content": "hello"}],
}


def test_the_scripted_model_is_not_served_outside_dev(client):
    assert client.post("/dev/scripted-model/v1/chat/completions", json=CHAT).status_code == 404


@pytest.mark.parametrize("app_config", [{**RUN_CONFIG, "DEV": True}])
def test_in_dev_a_run_reaches_the_scripted_model_in_process_and_is_labelled(
    app, dashboard, orders, client, project_key
):
    answer = client.post("/dev/scripted-model/v1/chat/completions", json=CHAT)
    assert answer.status_code == 200 and answer.get_json()["choices"][0]["message"]["content"]
    conversation_id, _ = orders
    with app.app_context():
        project_id = (
            db.session.query(Conversation.project_id).filter_by(id=conversation_id).scalar()
        )
        db.session.remove()
    add_connection(
        app,
        project_id,
        "scripted-demo",
        "openai",
        SCRIPTED_BASE_URL,
        api_key=None,
        model="toolscope-scripted-demo",
    )
    form = {"connection": "scripted-demo", "as_of": "turn:2"}
    run_id = panel_of(send(dashboard, conversation_id, **form)).get("id")[4:]
    done = finished_panel(app, dashboard, run_id)
    assert done.get("data-run-status") == "succeeded", done.text
    assert "Scripted demo model" in done.select(".run-panel-head")[0].text
    # No result and no tool offered in what it received (the stale turn is left out): it
    # answers, where the agent called lookup_order.
    assert "(Scripted demo model)" in done.select(".run-side")[0].text
    assert done.select(".verdict")[0].text == "Answered instead of calling"
    run_page = page(dashboard.get(f"/runs/{run_id}"))
    assert run_page.select(".scripted-note")
    listing = page(dashboard.get(f"/conversations/{conversation_id}"))
    assert "Scripted demo model" in listing.select("#runs tbody tr")[0].text
