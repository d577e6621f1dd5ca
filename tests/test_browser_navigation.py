"""Navigating a long conversation in a real browser: jump to a turn, the turn index, errors
only, collapse all, and deep links (#turn-n, #round-<message>-<round>, #call-<id>) that load
the window holding their target when it is not in the first one.

Marked ``browser`` (see tests/browser_support.py). Screenshots of each view, in light and dark,
go to ``test-artifacts/``.
"""

from __future__ import annotations

import re

import factories as f
import pytest
from browser_support import (  # noqa: F401  (fixtures)
    chromium_fixture,
    playwright_expect,
    scheme_fixture,
    screenshot,
    tab_fixture,
)
from sqlalchemy import select, update

from webapp.db import db
from webapp.models import Message, ToolInvocation

TURNS = 300

pytestmark = pytest.mark.browser

expect = playwright_expect()


@pytest.fixture
def app_config():
    return {"DEV": True, "LIVE_POLL_SECONDS": 30}


@pytest.fixture
def long_conversation(app, project_key):
    """300 turns of 2 rounds x 5 calls (3,000 calls); turns 3 and 250 have a failed call."""
    with app.app_context():
        conv = f.big_conversation(
            project_key.project_id, "nav", turns=TURNS, rounds=2, parallel=5, response_chars=40
        )
        assistants = db.session.scalars(
            select(Message.id)
            .where(Message.conversation_id == conv.id, Message.role == "assistant")
            .order_by(Message.created_at, Message.id)
        ).all()
        # The factory fails call 0.0 of every run; here only two turns fail.
        db.session.execute(
            update(ToolInvocation)
            .where(ToolInvocation.message_id.in_(assistants))
            .values(is_error=False)
        )
        failed = {}
        for turn in (3, 250):
            call_id = db.session.scalar(
                select(ToolInvocation.id)
                .where(ToolInvocation.message_id == assistants[turn - 1])
                .order_by(ToolInvocation.round_index.desc(), ToolInvocation.sequence_index)
                .limit(1)
            )
            db.session.execute(
                update(ToolInvocation).where(ToolInvocation.id == call_id).values(is_error=True)
            )
            failed[turn] = (assistants[turn - 1], call_id)
        db.session.commit()
        return conv.id, failed


def test_jump_to_a_turn_far_down(tab, long_conversation, scheme):
    page, _ = tab
    cid, _failed = long_conversation
    page.goto(f"/conversations/{cid}")
    assert page.locator("#turn-200").count() == 0
    page.fill("#jump-turn", "200")
    page.click(".jump button")
    expect(page).to_have_url(re.compile(r"at=turn-200#turn-200$"))
    target = page.locator("#turn-200")
    expect(target).to_be_in_viewport()
    # The browser scrolls to the fragment itself before the page's script marks the turn, so
    # the mark is waited for, not read at once (a CI run read it a moment too early).
    expect(page.locator(".msg:has(#turn-200)")).to_have_class(re.compile(r"\bfocused\b"))
    # One window, not 200 scroll loads: the first turn shown is 200.
    assert page.locator(".msg-user .turn-label").first.inner_text() == "Turn 200"
    expect(page.locator(".window-notice")).to_contain_text("Showing from turn 200")
    screenshot(page, f"nav-jump-{scheme}", full_page=False)


def test_turn_index_marks_errors_and_jumps(tab, long_conversation, scheme):
    page, _ = tab
    cid, _failed = long_conversation
    page.goto(f"/conversations/{cid}")
    page.click(".turn-index summary")
    grid = page.locator(".turn-grid")
    expect(grid.locator("a")).to_have_count(TURNS)
    errors = page.locator(".turn-index-errors a.turn-link")
    expect(errors).to_have_text(["3", "250"])
    screenshot(page, f"nav-turn-index-{scheme}", full_page=False)
    # A turn already on the page scrolls there without loading anything.
    page.locator(".turn-index-errors a", has_text="3").click()
    expect(page).to_have_url(re.compile(rf"/conversations/{cid}#turn-3$"))
    expect(page.locator("#turn-3")).to_be_in_viewport()
    # One further down loads its window.
    page.locator(".turn-index-errors a", has_text="250").click()
    expect(page).to_have_url(re.compile(r"at=turn-250#turn-250$"))
    expect(page.locator("#turn-250")).to_be_in_viewport()


def test_errors_only(tab, long_conversation, scheme):
    page, _ = tab
    cid, failed = long_conversation
    page.goto(f"/conversations/{cid}")
    page.click("text=Errors only")
    expect(page).to_have_url(re.compile(r"view=errors"))
    runs = page.locator("#timeline .msg")
    expect(runs).to_have_count(2)
    cards = page.locator("#timeline .call-card")
    expect(cards).to_have_count(2)
    assert all("has-error" in (c.get_attribute("class") or "") for c in cards.all())
    expect(runs.nth(1).locator(".turn-label")).to_have_text("Turn 250")
    screenshot(page, f"nav-errors-{scheme}", full_page=False)
    # Its turn label opens the run in the full timeline.
    runs.nth(1).locator(".turn-label").click()
    message_id, call_id = failed[250]
    expect(page).to_have_url(re.compile(rf"at=msg-{message_id}#msg-{message_id}$"))
    expect(page.locator(f"#msg-{message_id}")).to_be_in_viewport()
    expect(page.locator(f"#call-{call_id}")).to_be_visible()


def test_collapse_all(tab, long_conversation, scheme):
    page, _ = tab
    cid, _failed = long_conversation
    page.goto(f"/conversations/{cid}")
    first_run = page.locator("#timeline .msg-assistant .run").first
    expect(first_run).to_be_visible()
    page.click("[data-view-toggle=collapsed]")
    expect(first_run).to_be_hidden()
    expect(page).to_have_url(re.compile(r"view=collapsed"))
    expect(page.locator("[data-view-toggle=collapsed]")).to_have_attribute("aria-pressed", "true")
    screenshot(page, f"nav-collapsed-{scheme}", full_page=False)
    # A click on a message's header unfolds just that one.
    page.locator("#timeline .msg-assistant .msg-head").first.click()
    expect(first_run).to_be_visible()
    expect(page.locator("#timeline .msg-assistant .run").nth(1)).to_be_hidden()
    # The view survives a reload (it is in the address).
    page.reload()
    expect(page.locator("#timeline.collapsed")).to_have_count(1)
    page.click("[data-view-toggle=collapsed]")
    expect(first_run).to_be_visible()


def test_deep_links_load_their_window(tab, long_conversation, scheme):
    page, _ = tab
    cid, failed = long_conversation
    message_id, call_id = failed[250]
    # A call far beyond the first window: the page asks for the window that holds it.
    page.goto(f"/conversations/{cid}#call-{call_id}")
    expect(page).to_have_url(re.compile(rf"at=call-{call_id}#call-{call_id}$"))
    expect(page.locator(f"#call-{call_id}")).to_be_in_viewport()
    screenshot(page, f"nav-deep-call-{scheme}", full_page=False)
    # A round.
    page.goto(f"/conversations/{cid}#round-{message_id}-1")
    expect(page).to_have_url(re.compile(rf"at=round-{message_id}-1#round-{message_id}-1$"))
    expect(page.locator(f"#round-{message_id}-1")).to_be_in_viewport()
    # A turn.
    page.goto(f"/conversations/{cid}#turn-123")
    expect(page.locator("#turn-123")).to_be_in_viewport()
    # Clicking a call names it in the address bar, so the address can be shared.
    card = page.locator("#timeline .call-card").first
    card.click()
    card_id = card.get_attribute("id")
    expect(page).to_have_url(re.compile(rf"#{card_id}$"))


def test_an_anchor_of_another_conversation_is_not_found(tab, long_conversation):
    page, problems = tab
    cid, _failed = long_conversation
    problems.expected = ("404",)
    response = page.goto(f"/conversations/{cid}?at=call-999999999")
    assert response.status == 404


def test_a_round_in_full_and_the_model_bars(tab, app, client, project_key, scheme):
    from test_html_rounds import turn_with_round_text

    page, _ = tab
    turn_with_round_text(client, project_key)
    with app.app_context():
        from webapp.models import Conversation

        cid = db.session.scalar(select(Conversation.id).where(Conversation.external_id == "r1"))
    page.goto(f"/conversations/{cid}")
    expect(page.locator(".round-text")).to_contain_text("Let me look it up <script>")
    expect(page.locator(".round-latency")).to_have_text("1.20 s")
    page.locator(".round-reasoning summary").click()
    expect(page.locator(".round-reasoning .content")).to_be_visible()
    # Plotly draws the model's bar with its own legend entry.
    expect(page.locator(".waterfall .legendtext", has_text="model (LLM call)")).to_be_visible()
    expect(page.locator(".waterfall summary")).to_contain_text("model 1.20 s")
    screenshot(page, f"round-in-full-{scheme}", full_page=False)


def test_a_deep_link_to_a_call_deep_in_a_long_run_loads_its_chunks(tab, app, project_key):
    page, _ = tab
    with app.app_context():
        conv = f.big_conversation(
            project_key.project_id, "long-run", turns=3, rounds=20, parallel=5, response_chars=20
        )
        cid = conv.id
        last = db.session.scalar(
            select(ToolInvocation.id)
            .join(Message, Message.id == ToolInvocation.message_id)
            .where(Message.conversation_id == cid)
            .order_by(ToolInvocation.id.desc())
            .limit(1)
        )
        db.session.commit()
    # Call 100 of the third run: the first chunk shows 30, so three more chunks load.
    page.goto(f"/conversations/{cid}#call-{last}")
    expect(page).to_have_url(re.compile(rf"at=call-{last}#call-{last}$"))
    expect(page.locator(f"#call-{last}")).to_be_in_viewport()
