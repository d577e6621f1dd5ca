"""The dashboard in a real browser: Debian's Chromium driven by Playwright, against the app
served over HTTP (``live_server``).

The main journey and the live view run on SQLite and PostgreSQL; the other tests on SQLite only
(the HTML tests cover PostgreSQL for them). Marked ``browser``: skipped where /usr/bin/chromium
is missing, except in CI (``CI`` set), where a missing browser fails. Every test records console
errors, page errors, failed requests and any request to a host other than the test server, and
fails on any of them. Screenshots go to ``test-artifacts/`` (not committed);
``TOOLSCOPE_UPDATE_SCREENSHOT=1`` also refreshes ``docs/screenshot-conversation.png``.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import factories as f
import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    TIMEOUT_MS,
    PageWatch,
    chromium_fixture,
    new_page,
    playwright_expect,
    screenshot,
    tab_fixture,
)
from sqlalchemy import select, update

from webapp.db import db
from webapp.models import Conversation, Message, ToolInvocation

README_SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "screenshot-conversation.png"

pytestmark = pytest.mark.browser

expect = playwright_expect()


@pytest.fixture
def app_config():
    # DEV: loopback needs no login (the login form has its own test); fast polling for the
    # live view.
    return {"DEV": True, "LIVE_POLL_SECONDS": 0.3}


@pytest.fixture(params=["light"])
def scheme(request) -> str:
    return request.param


def seed(app, project_key, build) -> int:
    with app.app_context():
        result = build(project_key.project_id)
        db.session.commit()
        return result.id


def rich_project(project_id: int) -> Conversation:
    now = datetime.now(UTC)
    for i, title in enumerate(
        ["Weekly sales report for EMEA", "Password reset loop", "Invoice 2026-118 mismatch"]
    ):
        conv = f.simple_conversation(project_id, f"conv-{i}", at=now - timedelta(hours=i + 1))
        conv.title = title
    return f.support_conversation(project_id)


@pytest.mark.parametrize("scheme", ["light", "dark"], indirect=True)
def test_list_to_conversation_to_call_detail_to_replay(app, project_key, tab, scheme):
    page, _problems = tab
    conv_id = seed(app, project_key, rich_project)
    page.goto("/conversations")
    page.wait_for_selector(f"#conv-{conv_id}")
    screenshot(page, f"list-{scheme}")

    # Active search narrows the list and puts the query in the URL.
    page.locator("#q").press_sequentially("refund")
    expect(page).to_have_url(re.compile(r"q=refund"))
    expect(page.locator("#conv-rows tr[data-row-id]")).to_have_count(1)

    # Into the conversation (a boosted link: no full reload).
    page.click(f"#conv-{conv_id} a.conv-title")
    expect(page).to_have_url(re.compile(rf"/conversations/{conv_id}$"))
    page.wait_for_selector(".turn-label")
    # The waterfall is drawn by Plotly, from the local copy.
    page.wait_for_selector(".chart .main-svg")
    assert page.locator(".chart .main-svg").count() >= 1
    # Parallel calls sit side by side: same top, increasing left.
    boxes = [c.bounding_box() for c in page.locator(".round").first.locator(".call-card").all()]
    assert len(boxes) == 3
    assert len({round(b["y"]) for b in boxes}) == 1
    assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    screenshot(page, f"conversation-{scheme}")

    # The call detail opens in the side panel.
    card = page.locator(".call-card", has_text="search_kb").first
    card.click()
    panel = page.locator("#detail .detail")
    panel.wait_for()
    assert panel.locator("h2").inner_text() == "search_kb"
    assert "refund policy" in panel.locator(".field pre").first.inner_text()
    assert "selected" in (card.get_attribute("class") or "")
    screenshot(page, f"call-detail-{scheme}", full_page=False)
    if scheme == "light" and os.environ.get("TOOLSCOPE_UPDATE_SCREENSHOT"):
        # The README's picture: the top of the page, timeline and call panel side by side.
        page.set_viewport_size({"width": 1400, "height": 1050})
        page.evaluate("window.scrollTo(0, 0)")
        README_SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(README_SCREENSHOT))

    # Escape closes it; opening again and following the replay link lands on the call.
    page.keyboard.press("Escape")
    page.wait_for_selector("#detail:empty", state="attached")
    card.click()
    panel.wait_for()
    call_id = card.get_attribute("id").removeprefix("call-")
    page.click("text=Show in the replay preview")
    expect(page).to_have_url(re.compile(rf"#call-{call_id}$"))
    page.wait_for_selector(f"#call-{call_id}")
    screenshot(page, f"replay-{scheme}", full_page=False)


@SQLITE_ONLY
def test_show_all_and_copy(app, project_key, tab):
    page, _problems = tab
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    long_result = "\n".join(f"line {i}: " + "lorem ipsum " * 8 for i in range(200))

    def build(project_id):
        now = datetime.now(UTC)
        conv = f.conversation(project_id, "long", title="Long result")
        msg = f.message(conv, "m", "assistant", "Done.", at=now, status="completed")
        f.calls(msg, 0, [f.Call("export_csv", {"rows": 200}, long_result)], at=now)
        return conv

    conv_id = seed(app, project_key, build)
    page.goto(f"/conversations/{conv_id}")
    page.click(".call-card")
    page.wait_for_selector("#detail .show-all")
    folded = page.locator("#detail .field pre").nth(1).inner_text()
    assert len(folded) < len(long_result)
    page.click("#detail .show-all")
    expect(page.locator("#detail [id$=-response] pre")).to_contain_text("line 199")
    copy = page.locator("#detail button.copy").nth(1)
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == long_result


def test_a_live_update_arrives_without_moving_the_page(app, project_key, tab):
    page, _problems = tab
    conv_id = seed(app, project_key, f.support_conversation)
    page.set_viewport_size({"width": 1400, "height": 600})
    page.goto(f"/conversations/{conv_id}")
    page.wait_for_selector("#live")
    # The reader looks at turn 2; the update lands further down (turn 3's run, a new turn 4).
    page.evaluate("document.querySelectorAll('.turn-label')[1].scrollIntoView()")
    anchor = page.locator(".turn-label").nth(1)
    top_before = anchor.bounding_box()["y"]
    assert 0 <= top_before < 100

    with app.app_context():
        conv = db.session.get(Conversation, conv_id)
        a3 = db.session.scalar(select(Message).where(Message.external_id.like("%-a3")))
        a3_id = a3.id
        now = datetime.now(UTC)
        # The in-progress run gets its response and a second round, then a new turn starts.
        db.session.execute(
            update(ToolInvocation)
            .where(ToolInvocation.message_id == a3.id)
            .values(response='{"status": "shipped"}', response_created_at=now)
        )
        f.calls(a3, 1, [f.Call("notify_customer", {"channel": "email"}, "sent")], at=now)
        a3.status = "completed"
        a3.content = "Order #1043 shipped yesterday."
        f.message(conv, "live-u4", "user", "Great, thank you!", at=now + timedelta(seconds=1))
        db.session.execute(
            update(Conversation).where(Conversation.id == conv_id).values(updated_at=now)
        )
        db.session.commit()

    page.wait_for_selector("text=Great, thank you!")
    page.wait_for_selector(f"#msg-{a3_id} .call-card:has-text('notify_customer')")
    assert "Order #1043 shipped yesterday." in page.locator(f"#msg-{a3_id} .final").inner_text()
    assert page.locator(f"#msg-{a3_id} .badge-run-in_progress").count() == 0
    # Content arrived below: what the reader was looking at did not move.
    assert abs(anchor.bounding_box()["y"] - top_before) < 2
    assert page.locator("#live").count() == 1
    screenshot(page, "live-update", full_page=False)


@SQLITE_ONLY
def test_the_list_shows_new_conversations_live(app, project_key, tab):
    page, _problems = tab
    seed(
        app,
        project_key,
        lambda pid: f.simple_conversation(pid, "old", at=datetime.now(UTC) - timedelta(hours=1)),
    )
    page.goto("/conversations")
    page.wait_for_selector(".live-strip")
    new_id = seed(app, project_key, lambda pid: f.simple_conversation(pid, "brand-new"))
    page.wait_for_selector(f"#conv-{new_id}")
    ids = page.eval_on_selector_all("#conv-rows tr[data-row-id]", "rows => rows.map(r => r.id)")
    assert ids[0] == f"conv-{new_id}" and len(ids) == 2


@SQLITE_ONLY
def test_hostile_content_is_shown_as_text_and_runs_nothing(app, project_key, tab):
    from test_html_escaping import XSS, hostile_conversation

    page, problems = tab
    with app.app_context():
        conv_id = hostile_conversation(project_key.project_id)
        db.session.commit()
    page.add_init_script("window.__pwned = 0; window.alert = () => { window.__pwned += 1; };")
    for url in ("/conversations", f"/conversations/{conv_id}", "/tools", "/settings"):
        page.goto(url)
        page.wait_for_selector("main h1")
    page.goto(f"/conversations/{conv_id}")
    page.wait_for_selector(".chart .main-svg")
    assert page.locator("h1").inner_text() == f"Title {XSS}"
    page.locator(".call-card").first.click()
    page.wait_for_selector("#detail .detail")
    page.locator(".chart .main-svg").first.hover()
    for element in page.locator(".call-card").all():
        element.hover()
    assert page.evaluate("window.__pwned") == 0
    assert page.locator("img[src='x']").count() == 0
    assert page.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    assert f"fn {XSS}" in page.locator("#detail h2").inner_text()
    assert problems.dialogs == []
    screenshot(page, "hostile", full_page=False)


@SQLITE_ONLY
def test_ten_thousand_calls_open_fast_and_load_as_you_scroll(app, project_key, tab):
    page, _problems = tab
    conv_id = seed(app, project_key, lambda pid: f.big_conversation(pid, turns=200))
    response = page.goto(f"/conversations/{conv_id}")
    assert len(response.body()) < 100 * 1024
    page.wait_for_selector(".call-card")
    shown = page.locator("article.msg-assistant").count()
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    page.locator("article.msg-assistant").nth(shown).wait_for()
    screenshot(page, "ten-thousand-calls", full_page=False)


@SQLITE_ONLY
def test_login_form(app, project_key, chromium, live_server):
    app.config["DEV"] = False
    options = {"base_url": live_server, "viewport": {"width": 1000, "height": 700}}
    with new_page(chromium, **options) as page:
        page.context.set_default_timeout(TIMEOUT_MS)
        problems = PageWatch(page)
        page.goto("/tools")
        page.wait_for_url(re.compile(r"/login\?next=/tools"))
        screenshot(page, "login", full_page=False)
        page.fill("#password", "test-password")
        page.click("button[type=submit]")
        expect(page).to_have_url(re.compile(r"/tools$"))
        assert page.locator("h1").inner_text() == "Tools"
    assert [p for p in problems.problems if "401" not in p] == []
    assert problems.outside == []
