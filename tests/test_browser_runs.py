"""Runs in Chromium, light and dark (issue 25, items 4 and 7): the replay preview's "Send to
model" shows the run queued, then (polled in place, no page load) the model's next action
beside what the agent did; a fork from a call with an edited result shows its edit and the
model's answer to it. The fake provider is on loopback (tests/fake_providers.py); the queue is
worked in the test's thread while the page polls.

Marked ``browser`` (see tests/browser_support.py). Screenshots go to
``test-artifacts/runs-*.png`` for a person to look at.
"""

from __future__ import annotations

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    playwright_expect,
    scheme_fixture,
    tab_fixture,
)
from runs_support import (
    CALL_ID,
    CID,
    RUN_CONFIG,
    connect_fake,
    orders_conversation,
    work,
)

from webapp.db import db
from webapp.models import Conversation, ToolInvocation

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()


@pytest.fixture
def app_config():
    return {**RUN_CONFIG, "DEV": True}


@pytest.fixture
def orders(app, project_key, fake):
    orders_conversation(app, project_key.project_id)
    connect_fake(app, project_key.project_id, fake)
    with app.app_context():
        conversation_id = db.session.query(Conversation.id).filter_by(external_id=CID).scalar()
        call_query = db.session.query(ToolInvocation.id)
        call_id = call_query.filter_by(external_tool_call_id=CALL_ID).scalar()
        db.session.remove()
    return conversation_id, call_id


def test_send_a_replay_to_a_model_from_the_preview(app, tab, orders, scheme):
    page, watch = tab
    conversation_id, _ = orders
    page.goto(f"/conversations/{conversation_id}/replay?as_of=turn:2")
    box = page.locator(".run-box")
    box.locator("select[name=connection]").select_option("oa")
    page.evaluate("() => { window.__sameDocument = true }")
    box.get_by_role("button", name="Send to model").click()
    panel = box.locator(".run-panel")
    expect(panel).to_have_attribute("data-run-status", "queued")
    expect(panel).to_contain_text("Queued")
    box.scroll_into_view_if_needed()
    watch.shot(f"runs-preview-queued-{scheme}", full_page=False)

    assert work(app) == 1
    expect(panel).to_have_attribute("data-run-status", "succeeded")
    expect(panel.locator(".verdict")).to_have_text("Same calls")
    model_side = panel.locator(".run-side").first
    expect(model_side.locator(".call-card .fn")).to_have_text("lookup_order")
    expect(model_side.locator(".round-usage")).to_contain_text(" in / ")
    expect(panel.locator(".run-side").nth(1).locator(".call-card .fn")).to_have_text(
        "lookup_order"
    )
    assert page.evaluate("() => window.__sameDocument") is True
    panel.scroll_into_view_if_needed()
    watch.shot(f"runs-preview-done-{scheme}", full_page=False)

    # The run's own page: its request, raw answer and facts.
    panel.get_by_role("link", name="Open the run").click()
    expect(page.locator("h1")).to_contain_text("Run")
    expect(page.locator(".run-raw").first).to_contain_text('"messages"')
    watch.shot(f"runs-page-{scheme}")


def test_fork_a_call_with_an_edited_result(app, tab, orders, scheme):
    page, watch = tab
    conversation_id, call_row = orders
    page.goto(f"/conversations/{conversation_id}/fork?call={call_row}")
    form = page.locator("#fork-form")
    form.locator("textarea[name=edit_content]").fill("lost in transit")
    form.locator("select[name=connection]").select_option("oa")
    watch.shot(f"runs-fork-form-{scheme}")
    form.get_by_role("button", name="Send the fork").click()
    panel = page.locator("#fork-run .run-panel")
    expect(panel).to_have_attribute("data-run-status", "queued")
    assert work(app) == 1
    expect(panel).to_have_attribute("data-run-status", "succeeded")
    expect(panel.locator(".run-edits")).to_contain_text("result replaced")
    expect(panel.locator(".run-edits")).to_contain_text("lost in transit")
    expect(panel.locator(".run-side").first).to_contain_text("Order A1: lost in transit.")
    panel.scroll_into_view_if_needed()
    watch.shot(f"runs-fork-done-{scheme}")

    # The conversation page lists it.
    page.goto(f"/conversations/{conversation_id}")
    runs = page.locator("#runs")
    expect(runs.locator("tbody tr")).to_have_count(1)
    expect(runs.locator("tbody tr")).to_contain_text("1 edit")
    runs.scroll_into_view_if_needed()
    watch.shot(f"runs-conversation-{scheme}", full_page=False)


def test_send_both_policies_of_a_comparison(app, tab, orders, scheme):
    page, watch = tab
    conversation_id, _ = orders
    page.goto(
        f"/conversations/{conversation_id}/replay/compare?a.as_of=turn:2&b.as_of=turn:2"
        "&b.freshness=off",
        timeout=60_000,  # two replays built: generous on a loaded machine
    )
    box = page.locator(".run-box")
    box.locator("select[name=connection]").select_option("oa")
    box.get_by_role("button", name="Send both").click()
    panels = page.locator("#compare-runs .run-panel")
    expect(panels).to_have_count(2)
    assert work(app) == 2
    expect(panels.nth(0)).to_have_attribute("data-run-status", "succeeded")
    expect(panels.nth(1)).to_have_attribute("data-run-status", "succeeded")
    # A leaves the stale lookup out (the model looks again); B keeps it (the model answers).
    expect(panels.nth(0).locator(".verdict")).to_have_text("Same calls")
    expect(panels.nth(1).locator(".verdict")).to_have_text("Answered instead of calling")
    box.scroll_into_view_if_needed()
    watch.shot(f"runs-compare-both-{scheme}", full_page=False)
