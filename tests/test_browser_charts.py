"""The charts in a real browser: they render with the data of the tables, follow the filters
through htmx, log no console errors, and no request leaves the machine.

Marked ``browser`` (deselect with ``-m "not browser"``); skipped when Debian's Chromium is not
installed, unless the ``CI`` environment variable is set (then a missing browser is a failure).
Screenshots are saved to ``test-artifacts/`` for a person to look at.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from analytics_data import Seeded, seed
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    PageWatch,
    chromium_fixture,
    dev_app_config_fixture,
    new_page,
    skip_without_browser,
)

MARCH = "from=2025-03-01&to=2025-03-31"

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

skip_without_browser()


@pytest.fixture
def seeded(app, project_key) -> Seeded:
    with app.app_context():
        return seed(project_key.project_id)


class ChartPage(PageWatch):
    """A watched page that knows how to wait for the Plotly charts and read their traces."""

    def draw_all(self) -> None:
        """Scroll every chart into view (they are drawn lazily) and wait until each is drawn."""
        for chart in self.page.locator("div.chart[data-figure]").all():
            chart.scroll_into_view_if_needed()
        self.page.wait_for_function(
            "() => [...document.querySelectorAll('div.chart[data-figure]')]"
            ".every(el => el.querySelector('.main-svg') && el._fullData)"
        )

    def trace(self, chart: str, name: str) -> dict:
        return self.page.evaluate(
            "([chart, name]) => { const el = document.querySelector(`[data-chart='${chart}']`);"
            " const t = el.data.find(t => t.name === name);"
            " return t ? {x: t.x, y: t.y, visible: t.visible ?? true} : null; }",
            [chart, name],
        )


@pytest.fixture
def browser(chromium) -> Iterator[ChartPage]:
    with new_page(chromium, viewport={"width": 1280, "height": 900}) as page:
        yield ChartPage(page)


def test_costs_page_charts_render_and_follow_filters(live_server, seeded, browser) -> None:
    page = browser.page
    page.goto(f"{live_server}/costs?{MARCH}")
    browser.draw_all()
    assert page.locator("div.chart .main-svg").count() >= 5
    cost = browser.trace("cost", "Cost")
    assert cost["x"][9] == "2025-03-10" and cost["y"][9] == pytest.approx(0.008296)
    assert browser.trace("tool-cost", "Attributed input cost")["y"] == ["fetch", "search"]
    browser.shot("costs-page")

    # A filter change swaps the charts in through htmx and updates the address bar.
    with page.expect_response(lambda r: "/costs?" in r.url and "channel=beta" in r.url):
        page.select_option("select[name=channel]", "beta")
    page.wait_for_function(
        "() => document.querySelector(\"[data-chart='tool-cost']\")?._fullData"
        " && document.querySelector(\"[data-chart='tool-cost']\").data[0].y.length === 1"
    )
    browser.draw_all()
    assert browser.trace("tool-cost", "Attributed input cost")["y"] == ["search"]
    assert "channel=beta" in page.url
    browser.shot("costs-page-channel-beta")

    assert browser.problems == []
    assert browser.outside == []


def test_conversation_charts_render_with_window_and_budget(live_server, seeded, browser) -> None:
    page = browser.page
    page.goto(f"{live_server}/conversations/{seeded.c1}/charts")
    browser.draw_all()
    assert browser.trace("context", "Tool results")["y"] == [0, 400, 450, 450, 1450, 0]
    window = browser.trace("context", "Context window (gpt-4o: 128,000)")
    assert window["visible"] == "legendonly"  # far above a 1,518-token context
    browser.shot("conversation-charts")

    with page.expect_response(lambda r: "context_budget=1000" in r.url):
        page.fill("input[name=context_budget]", "1000")
        page.press("input[name=context_budget]", "Enter")
    page.wait_for_selector("[data-chart='context']")
    browser.draw_all()
    assert browser.trace("context", "Replay budget (1,000)")["y"] == [1000, 1000]
    browser.shot("conversation-charts-budget")

    assert browser.problems == []
    assert browser.outside == []


def test_tool_charts_page_for_one_tool(live_server, seeded, browser) -> None:
    page = browser.page
    page.goto(f"{live_server}/tools/charts?{MARCH}&tool=search")
    browser.draw_all()
    sizes = page.evaluate("() => document.querySelector(\"[data-chart='result-sizes']\").data[0]")
    assert (sizes["x"], sizes["median"]) == (["search"], [50])
    browser.shot("tool-charts-search")
    assert browser.problems == []
    assert browser.outside == []


def test_panels_in_the_dashboard_pages_load_when_shown(live_server, seeded, browser) -> None:
    page = browser.page
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/charts" in r.url else None)
    page.goto(f"{live_server}/conversations/{seeded.c1}")
    page.wait_for_load_state("networkidle")
    assert asked == []  # the panel is closed: nothing fetched yet
    page.get_by_text("Token and cost charts").click()
    page.wait_for_selector("[data-chart='context']")
    browser.draw_all()
    assert browser.trace("context", "User")["y"] == [5, 5, 5, 9, 9, 12]
    assert len(asked) == 1
    browser.shot("conversation-page-with-charts")

    page.goto(f"{live_server}/tools")
    page.locator("#tool-charts").scroll_into_view_if_needed()
    # The seeded calls are from March 2025, outside the default last 30 days.
    page.wait_for_selector("#tool-charts p.empty")
    page.fill("#tool-charts input[name=from]", "2025-03-01")
    page.wait_for_selector("[data-chart='tool-cost']")
    browser.draw_all()
    assert page.locator("#tool-charts div.chart .main-svg").count() >= 1
    browser.shot("tools-page-with-charts")
    assert browser.problems == []
    assert browser.outside == []
