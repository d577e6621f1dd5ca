"""The live view: a poll with nothing new is one query and a 204; new turns, rounds, calls and
responses come back as fragments that htmx appends or swaps in place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factories as f
from dashboard_support import HTMX, LOGIN_CHECK, dashboard_fixture, data, page  # noqa: F401
from sqlalchemy import delete, select, update

from webapp.db import db
from webapp.models import Conversation, Message, ToolInvocation


def live_url(doc) -> str:
    poller = doc.one("#live")
    assert poller.get("hx-target") == "this" and poller.get("hx-swap") == "outerHTML"
    assert poller.get("hx-trigger").startswith("every ")
    return poller.get("hx-get")


def touch(conv_id: int, at: datetime | None = None) -> None:
    """What ingestion does on every write: last activity is now."""
    db.session.execute(
        update(Conversation)
        .where(Conversation.id == conv_id)
        .values(updated_at=at or datetime.now(UTC))
    )


def test_nothing_new_is_one_query_and_204(app, dashboard, project_key, count_queries):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    url = live_url(page(dashboard.get(f"/conversations/{conv_id}")))
    with count_queries() as counter:
        response = dashboard.get(url, headers=HTMX)
    assert response.status_code == 204 and response.data == b""
    assert counter.count == 1 + LOGIN_CHECK


def test_a_new_turn_is_appended_before_a_new_poller(app, dashboard, project_key):
    with data(app):
        conv = f.support_conversation(project_key.project_id)
        conv_id, start = conv.id, conv.updated_at
    url = live_url(page(dashboard.get(f"/conversations/{conv_id}")))
    with data(app):
        conv = db.session.get(Conversation, conv_id)
        t = start + timedelta(seconds=5)
        f.message(conv, "u4", "user", "Thanks! One more thing.", at=t)
        a4 = f.message(conv, "a4", "assistant", None, at=t, status="in_progress")
        f.calls(
            a4,
            0,
            [f.Call("search_kb", {"query": "more"}), f.Call("get_order", {"order_id": "9"})],
            at=t,
        )
        touch(conv_id)
    doc = page(dashboard.get(url, headers=HTMX))
    new = doc.select("article.msg")
    # The two new messages, then the poller again with a cursor after them.
    assert [m.one(".msg-foot").text for m in new if not m.get("hx-swap-oob")] == ["u4", "a4"]
    assert [n.text for n in new[-1].select(".call-card .fn")] == ["search_kb", "get_order"]
    assert "Turn 4" in doc.text
    next_url = live_url(doc)
    assert next_url != url
    # The header counts are swapped in place.
    summary = doc.one("#conv-summary")
    assert summary.get("hx-swap-oob") == "true" and summary.text.split()[:2] == ["4", "turns"]
    # Polling again right away: nothing new.
    assert dashboard.get(next_url, headers=HTMX).status_code == 204


def test_a_response_to_a_shown_call_updates_that_message_in_place(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    url = live_url(page(dashboard.get(f"/conversations/{conv_id}")))
    with data(app):
        in_progress = db.session.scalar(select(Message).where(Message.external_id.like("%-a3")))
        db.session.execute(
            update(ToolInvocation)
            .where(ToolInvocation.message_id == in_progress.id)
            .values(response='{"status": "shipped"}', response_created_at=datetime.now(UTC))
        )
        in_progress.status = "completed"
        in_progress.content = "Order #1043 has shipped."
        touch(conv_id)
        msg_id = in_progress.id
    doc = page(dashboard.get(url, headers=HTMX))
    swapped = doc.one(f"#msg-{msg_id}")
    assert swapped.get("hx-swap-oob") == "true"
    assert [b.text for b in swapped.select(".call-card .badge")] == ["ok"]
    assert "Order #1043 has shipped." in swapped.one(".final").text
    assert "in progress" not in swapped.one(".msg-head").text
    # No new messages: the poller comes back unchanged in place, keeping the position.
    assert not [m for m in doc.select("article.msg") if not m.get("hx-swap-oob")]
    assert doc.one("#live")


def test_a_new_round_on_the_last_run_is_shown(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    url = live_url(page(dashboard.get(f"/conversations/{conv_id}")))
    with data(app):
        a3 = db.session.scalar(select(Message).where(Message.external_id.like("%-a3")))
        f.calls(
            a3,
            1,
            [f.Call("create_ticket", {"order_id": "1043"}, '{"ticket": "T-78"}')],
            at=a3.created_at,
        )
        touch(conv_id)
        msg_id = a3.id
    doc = page(dashboard.get(url, headers=HTMX))
    rounds = doc.one(f"#msg-{msg_id}").select(".round-label")
    assert [r.text.split()[:2] for r in rounds] == [["Round", "0"], ["Round", "1"]]


def test_new_calls_are_noticed_even_without_a_touch(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    url = live_url(page(dashboard.get(f"/conversations/{conv_id}")))
    with data(app):
        a1 = db.session.scalar(select(Message).where(Message.external_id.like("%-a1")))
        f.calls(a1, 5, [f.Call("late_call", {"x": 1}, "late")], at=a1.created_at)
        msg_id = a1.id
    doc = page(dashboard.get(url, headers=HTMX))
    assert "late_call" in [n.text for n in doc.one(f"#msg-{msg_id}").select(".fn")]


def test_a_deleted_conversation_stops_the_poll(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    url = live_url(page(dashboard.get(f"/conversations/{conv_id}")))
    with data(app):
        db.session.execute(delete(Conversation).where(Conversation.id == conv_id))
    assert dashboard.get(url, headers=HTMX).status_code == 286


def test_bad_poll_parameters_are_422(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    for query in ("after=zzz", "calls=-1", "calls=x", "v=yesterday"):
        assert dashboard.get(f"/conversations/{conv_id}/live?{query}").status_code == 422, query


def test_list_poll_puts_new_conversations_on_top(app, dashboard, project_key, count_queries):
    with data(app):
        f.simple_conversation(
            project_key.project_id, "first", at=datetime.now(UTC) - timedelta(minutes=5)
        )
    doc = page(dashboard.get("/conversations"))
    poller = doc.one(".live-strip")
    url = poller.get("hx-get")
    with count_queries() as counter:
        assert dashboard.get(url, headers=HTMX).status_code == 204
    assert counter.count == 1 + LOGIN_CHECK
    with data(app):
        new_id = f.simple_conversation(project_key.project_id, "second").id
    update_doc = page(dashboard.get(url, headers=HTMX))
    body = update_doc.one("tbody")
    assert body.get("hx-swap-oob") == "afterbegin:#conv-rows"
    assert [r.get("id") for r in body.select("tr")] == [f"conv-{new_id}"]
    next_url = update_doc.one(".live-strip").get("hx-get")
    assert next_url != url
    assert dashboard.get(next_url, headers=HTMX).status_code == 204


def test_list_poll_keeps_the_filters(app, dashboard, project_key):
    with data(app):
        f.simple_conversation(
            project_key.project_id, "first", at=datetime.now(UTC) - timedelta(minutes=5)
        )
    url = page(dashboard.get("/conversations?has_errors=1")).one(".live-strip").get("hx-get")
    assert "has_errors=1" in url
    with data(app):
        f.simple_conversation(project_key.project_id, "no-errors")
    doc = page(dashboard.get(url, headers=HTMX))
    assert not doc.select("tbody")  # the new conversation does not match: no rows
