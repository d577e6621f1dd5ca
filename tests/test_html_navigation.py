"""Navigating a long conversation: windows opened at a turn or an anchor, the turn index, the
errors-only view, and their query counts (constant as the conversation grows)."""

from __future__ import annotations

import factories as f
import pytest
from dashboard_support import (  # noqa: F401
    HTMX,
    LOGIN_CHECK,
    count_get,
    dashboard_fixture,
    data,
    page,
)
from sqlalchemy import select, update

from webapp.db import db
from webapp.models import Message, ToolInvocation
from webapp.views.conversations.timeline_model import Anchor, parse_anchor


@pytest.mark.parametrize(
    "raw, anchor",
    [
        ("turn-12", Anchor("turn", turn=12)),
        ("msg-7", Anchor("msg", message_id=7)),
        ("round-7-3", Anchor("round", message_id=7, round_index=3)),
        ("call-99", Anchor("call", call_id=99)),
    ],
)
def test_anchors_parse_and_name_themselves(raw, anchor):
    assert parse_anchor(raw) == anchor
    assert anchor.name == raw


@pytest.mark.parametrize(
    "raw",
    ["", "turn-0", "turn-", "turn-1-2", "round-3", "call-x", "msg--1", "row-1", "call-" + "9" * 20],
)
def test_malformed_anchors_are_refused(raw):
    with pytest.raises(ValueError):
        parse_anchor(raw)


def conversation_with_errors(app, project_id: int, turns: int, external_id: str = "nav"):
    """``turns`` turns of 2 x 5 calls; only the last call of turns 2 and ``turns`` fail."""
    with data(app):
        conv = f.big_conversation(
            project_id, external_id, turns=turns, rounds=2, parallel=5, response_chars=20
        )
        assistants = db.session.scalars(
            select(Message.id)
            .where(Message.conversation_id == conv.id, Message.role == "assistant")
            .order_by(Message.created_at, Message.id)
        ).all()
        db.session.execute(
            update(ToolInvocation)
            .where(ToolInvocation.message_id.in_(assistants))
            .values(is_error=False)
        )
        failed = []
        for turn in (2, turns):
            call_id = db.session.scalar(
                select(ToolInvocation.id)
                .where(ToolInvocation.message_id == assistants[turn - 1])
                .order_by(ToolInvocation.round_index.desc(), ToolInvocation.sequence_index.desc())
                .limit(1)
            )
            db.session.execute(
                update(ToolInvocation).where(ToolInvocation.id == call_id).values(is_error=True)
            )
            failed.append((turn, assistants[turn - 1], call_id))
        conv_id = conv.id
    return conv_id, failed


def first_turn(doc) -> str:
    return doc.select(".msg-user .turn-label")[0].text.strip()


def test_a_turn_window_opens_at_that_turn(app, dashboard, project_key):
    cid, _ = conversation_with_errors(app, project_key.project_id, 60)
    doc = page(dashboard.get(f"/conversations/{cid}?at=turn-45"))
    assert first_turn(doc) == "Turn 45"
    assert doc.one("#turn-45").get("href") == "#turn-45"
    assert doc.one("#timeline").get("data-anchor") == "turn-45"
    assert "Showing from turn 45" in doc.one(".window-notice").text
    # The next page continues the numbering.
    loader = next(n for n in doc.select("#timeline .loader") if "cursor=" in n.get("hx-get"))
    more = page(dashboard.get(loader.get("hx-get"), headers=HTMX))
    numbers = [int(n.text.split()[1]) for n in more.select(".msg-user .turn-label")]
    assert numbers[0] > 45 and numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_the_jump_form_redirects_to_the_deep_link(app, dashboard, project_key):
    cid, _ = conversation_with_errors(app, project_key.project_id, 5)
    response = dashboard.get(f"/conversations/{cid}?turn=4&view=collapsed")
    assert response.status_code == 302
    assert response.headers["Location"].endswith(
        f"/conversations/{cid}?at=turn-4&view=collapsed#turn-4"
    )
    # The JSON twin answers the window directly.
    doc = dashboard.get(f"/conversations/{cid}.json?turn=4").get_json()
    assert next(m["turn"] for m in doc["messages"] if m["message"]["role"] == "user") == 4


def test_round_and_call_anchors_open_their_turn(app, dashboard, project_key):
    cid, failed = conversation_with_errors(app, project_key.project_id, 60)
    turn, message_id, call_id = failed[-1]
    for anchor in (f"call-{call_id}", f"round-{message_id}-1", f"msg-{message_id}"):
        doc = page(dashboard.get(f"/conversations/{cid}?at={anchor}"))
        assert first_turn(doc) == f"Turn {turn}", anchor
        assert doc.one(f"#call-{call_id}")
        assert doc.one(f"#round-{message_id}-1")


@pytest.mark.parametrize("anchor", ["turn-999", "call-999999", "msg-999999", "round-999999-0"])
def test_an_anchor_outside_the_conversation_is_not_found(app, dashboard, project_key, anchor):
    cid, _ = conversation_with_errors(app, project_key.project_id, 3)
    assert dashboard.get(f"/conversations/{cid}?at={anchor}").status_code == 404


def test_an_anchor_of_another_conversation_is_not_found(app, dashboard, project_key):
    cid, _ = conversation_with_errors(app, project_key.project_id, 3)
    _other, failed = conversation_with_errors(app, project_key.project_id, 3, "other")
    response = dashboard.get(f"/conversations/{cid}?at=call-{failed[0][2]}")
    assert response.status_code == 404


@pytest.mark.parametrize("query", ["at=bogus", "view=nope", "turn=0", "turn=x"])
def test_bad_navigation_parameters_are_422(app, dashboard, project_key, query):
    cid, _ = conversation_with_errors(app, project_key.project_id, 2)
    assert dashboard.get(f"/conversations/{cid}?{query}").status_code == 422


def test_errors_only_shows_failed_calls_with_their_turns(app, dashboard, project_key):
    cid, failed = conversation_with_errors(app, project_key.project_id, 40)
    doc = page(dashboard.get(f"/conversations/{cid}?view=errors"))
    runs = doc.select("#timeline .msg")
    assert [r.one(".turn-label").text.strip() for r in runs] == ["Turn 2", "Turn 40"]
    cards = doc.select("#timeline .call-card")
    assert [c.get("id") for c in cards] == [f"call-{c}" for _, _, c in failed]
    # Each run's turn label opens it in the full timeline.
    _, message_id, _ = failed[1]
    link = runs[1].one(".turn-label").get("href")
    assert link.endswith(f"?at=msg-{message_id}#msg-{message_id}")
    # No live poll (it would add unfiltered messages).
    assert not doc.select("#live")


def test_the_turn_index_marks_turns_with_errors(app, dashboard, project_key):
    cid, _failed = conversation_with_errors(app, project_key.project_id, 12)
    doc = page(dashboard.get(f"/conversations/{cid}/turns", headers=HTMX))
    links = doc.select(".turn-grid a")
    assert [a.text for a in links] == [str(n) for n in range(1, 13)]
    marked = [a.text for a in links if "has-error" in a.get("class")]
    assert marked == ["2", "12"]
    assert links[11].get("href").endswith(f"/conversations/{cid}?at=turn-12#turn-12")
    twin = dashboard.get(f"/conversations/{cid}/turns.json").get_json()
    assert [t["errors"] for t in twin["turns"]][:3] == [0, 1, 0]
    assert twin["turns"][0]["calls"] == 10


def test_navigation_queries_do_not_grow(app, dashboard, project_key, count_queries):
    small, small_failed = conversation_with_errors(app, project_key.project_id, 8, "small")
    large, large_failed = conversation_with_errors(app, project_key.project_id, 200, "large")

    def counts(cid, failed):
        _, message_id, call_id = failed[-1]
        return [
            count_get(dashboard, count_queries, url)[0]
            for url in (
                f"/conversations/{cid}?at=turn-7",
                f"/conversations/{cid}?at=call-{call_id}",
                f"/conversations/{cid}?at=round-{message_id}-1",
                f"/conversations/{cid}?view=errors",
                f"/conversations/{cid}/turns",
            )
        ]

    assert counts(small, small_failed) == counts(large, large_failed)
    # The plain page's 10 (its runs included) and the window's start (1 query for a turn, 2
    # for an anchor); errors only reads the turn numbers of its page (1); the index page is
    # the project, the switcher, the conversation and one query.
    assert counts(large, large_failed) == [
        11 + LOGIN_CHECK,
        12 + LOGIN_CHECK,
        12 + LOGIN_CHECK,
        11 + LOGIN_CHECK,
        4 + LOGIN_CHECK,
    ]
