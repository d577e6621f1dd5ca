"""The replay pages in a real browser: the options form updates the result through htmx without
a reload and keeps the address in step, refused options show their message, the raw JSON view
and the copy button work, links from the timeline land on the call's anchor, and the comparison
marks what only one policy sends. No console errors, no request leaves the machine.

Marked ``browser``; skipped when Debian's Chromium is not installed, unless ``CI`` is set.
Screenshots go to ``test-artifacts/replay-*.png`` for a person to look at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import factories as f
import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    PageWatch,
    chromium_fixture,
    dev_app_config_fixture,
    new_page,
    skip_without_browser,
)
from dashboard_support import data

VIEWPORT = {"width": 1400, "height": 950}

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

skip_without_browser()


@pytest.fixture
def conversations(app, project_key) -> dict[str, int]:
    now = datetime.now(UTC) - timedelta(seconds=20)
    with data(app):
        support = f.support_conversation(project_key.project_id)
        failed = f.conversation(project_key.project_id, "failed-run", title="Failed run", at=now)
        f.message(failed, "fr-u1", "user", "Research the vendor", at=now)
        a = f.message(failed, "fr-a1", "assistant", None, at=now, status="failed")
        for r in range(3):
            f.calls(a, r, [f.Call("search", {"round": r}, f"result {r}")], at=now)
            f.usage(a, r)
        return {"support": support.id, "failed": failed.id}


class ReplayPage(PageWatch):
    """A watched page that can tell whether htmx updated it in place or it was reloaded."""

    def __init__(self, page) -> None:
        # The 422 of a refused option is expected; the browser logs every failed request.
        super().__init__(page, expected=("422",))

    def mark_document(self) -> None:
        """A flag that only survives while no full page load happens."""
        self.page.evaluate("() => { window.__notReloaded = true; }")

    def not_reloaded(self) -> bool:
        return self.page.evaluate("() => window.__notReloaded === true")


@pytest.fixture
def browser(chromium, live_server) -> Iterator[ReplayPage]:
    with new_page(chromium, viewport=VIEWPORT) as page:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
        yield ReplayPage(page)


def result_text(page) -> str:
    return page.locator("#replay-result").inner_text()


def test_the_options_form_updates_the_preview_without_a_reload(
    live_server, conversations, browser
) -> None:
    page = browser.page
    page.goto(f"{live_server}/conversations/{conversations['support']}/replay")
    assert page.locator("li.bubble-round .pair").count() == 4
    browser.shot("replay-preview")
    browser.mark_document()

    with page.expect_response(lambda r: "/replay?" in r.url):
        page.select_option("select[name=format]", "anthropic")
    page.wait_for_function("() => location.search.includes('format=anthropic')")
    assert "Anthropic Messages" in page.locator(".replay-asof").inner_text()
    assert browser.not_reloaded()

    # What the model saw when turn 2 began: the first turn and the new question, nothing later.
    with page.expect_response(lambda r: "as_of=turn" in r.url):
        page.select_option("select[name=as_of]", "turn:2")
    page.wait_for_function("() => location.search.includes('as_of=turn:2')")
    bubbles = page.locator("ol.chat li.bubble").all_inner_texts()
    assert "Also check my other order #1043 please." in bubbles[-1]
    assert not any("Any news?" in b for b in bubbles)
    assert browser.not_reloaded()

    # Reloading the pushed address shows the same choices and the same replay.
    page.reload()
    assert page.locator("select[name=format]").input_value() == "anthropic"
    assert page.locator("select[name=as_of]").input_value() == "turn:2"
    assert browser.problems == [] and browser.outside == []


def test_a_refused_option_shows_why_and_a_corrected_one_recovers(
    live_server, conversations, browser
) -> None:
    page = browser.page
    page.goto(f"{live_server}/conversations/{conversations['support']}/replay")
    url_before = page.url
    # A negative number never leaves the browser (min="0": htmx validates the form first)...
    page.fill("input[name=context_budget]", "-5")
    page.press("input[name=context_budget]", "Tab")
    assert not page.evaluate("() => document.querySelector('#replay-options').checkValidity()")
    # ...but a number the browser accepts and the server cannot use is answered in the page.
    with page.expect_response(lambda r: "/replay?" in r.url and r.status == 422):
        page.fill("input[name=context_budget]", "1e99")
        page.press("input[name=context_budget]", "Tab")
    page.wait_for_selector(".replay-error")
    assert "context_budget" in page.locator(".replay-error").inner_text()
    assert page.url == url_before  # the address keeps the options that work
    browser.shot("replay-refused-option")

    with page.expect_response(lambda r: "/replay?" in r.url and r.status == 200):
        page.fill("input[name=context_budget]", "60")
        page.press("input[name=context_budget]", "Tab")
    page.wait_for_selector(".replay-stats")
    assert "of a 60 budget" in page.locator(".replay-stats").inner_text()
    assert page.locator(".diag-counts").inner_text().count("pruned")
    assert browser.problems == [] and browser.outside == []


def test_raw_json_view_survives_updates_and_copy_puts_the_payload_on_the_clipboard(
    live_server, conversations, browser
) -> None:
    page = browser.page
    page.goto(f"{live_server}/conversations/{conversations['support']}/replay")
    page.click("label[for=view-json]")
    assert page.locator("#replay-raw-json").is_visible()
    assert not page.locator(".view-chat").is_visible()
    with page.expect_response(lambda r: "/replay?" in r.url):
        page.select_option("select[name=format]", "openai-responses")
    page.wait_for_function("() => location.search.includes('format=openai-responses')")
    # Still the JSON view, and the address says so.
    assert page.locator("#replay-raw-json").is_visible()
    assert not page.locator(".view-chat").is_visible()
    assert "view=json" in page.url
    shown = json.loads(page.locator("#replay-raw-json").inner_text())
    assert "input" in shown and "instructions" in shown
    browser.shot("replay-raw-json")

    button = page.locator(".view-json [data-copy-url]")
    button.click()
    page.wait_for_function("(b) => b.textContent === 'Copied'", arg=button.element_handle())
    copied = json.loads(page.evaluate("() => navigator.clipboard.readText()"))
    assert copied == shown
    assert browser.problems == [] and browser.outside == []


def test_the_timelines_link_lands_on_the_calls_anchor(live_server, conversations, browser) -> None:
    page = browser.page
    page.goto(f"{live_server}/conversations/{conversations['support']}")
    # A call of the failed run: not replayed, so its anchor is on the diagnostic that says why.
    card = page.locator("a.call-card").filter(has_text="search_kb").last
    card.click()
    link = page.get_by_role("link", name="Show in the replay preview")
    href = link.get_attribute("href")
    anchor = href.split("#", 1)[1]
    link.click()
    page.wait_for_url(lambda url: "/replay?call=" in url and url.endswith(f"#{anchor}"))
    target = page.locator(f"#{anchor}")
    target.wait_for(state="attached")
    row = page.locator(f"li.diag:has(#{anchor})")
    assert "run not completed" in row.inner_text()
    assert row.evaluate("el => el.matches(':has(> .anchor:target)')")
    box, viewport = row.bounding_box(), page.viewport_size
    assert box is not None and 0 <= box["y"] < viewport["height"]
    browser.shot("replay-anchor-omitted-call")

    # A replayed call: its anchor is the pair in the chat.
    page.goto(f"{live_server}/conversations/{conversations['support']}")
    page.locator("a.call-card").filter(has_text="get_order").first.click()
    page.get_by_role("link", name="Show in the replay preview").click()
    page.wait_for_url(lambda url: "/replay?call=" in url and "#call-" in url)
    pair = page.locator(".pair:target")
    pair.wait_for()
    assert "get_order" in pair.inner_text()
    assert browser.problems == [] and browser.outside == []


def test_the_comparison_marks_what_only_one_policy_sends(
    live_server, conversations, browser
) -> None:
    page = browser.page
    page.goto(f"{live_server}/conversations/{conversations['failed']}/replay")
    page.get_by_role("link", name="Compare with another policy").click()
    page.wait_for_selector(".compare-column")
    b_side = page.locator(".compare-column.side-B")
    assert b_side.locator("li.mark-only").count() == 2
    assert page.locator("table.compare-calls").inner_text().count("run not completed") == 2
    browser.shot("replay-compare")
    browser.mark_document()

    with page.expect_response(lambda r: "/replay/compare" in r.url):
        page.select_option("select[name='b.persistence']", "per-run")
    page.wait_for_selector("text=Both policies send the same payload.")
    assert b_side.locator("li.mark-only").count() == 0
    assert "b.persistence" not in page.url or "per-run" in page.url
    assert browser.not_reloaded()
    assert browser.problems == [] and browser.outside == []


def test_the_pages_in_dark_mode(live_server, conversations, chromium) -> None:
    with new_page(chromium, viewport=VIEWPORT, color_scheme="dark") as page:
        browser = ReplayPage(page)
        base = f"{live_server}/conversations/{conversations['support']}/replay"
        browser.page.goto(base + "?persistence=per-service-call&freshness=off")
        browser.shot("replay-preview-dark")
        browser.page.goto(base + "/compare?b.context_budget=150&freshness=off")
        browser.shot("replay-compare-dark")
        assert browser.problems == [] and browser.outside == []
