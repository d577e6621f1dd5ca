"""Issue 23's small things in a real browser, on the demo data, light and dark: call card
footers stay on one line at 1280 and 1024 px, freshness windows read in human units, the turn
index shows each turn's first words, the replay preview has one comparison button.

Marked ``browser`` (see tests/browser_support.py). Screenshots go to
``test-artifacts/small-*.png`` for a person to look at.
"""

from __future__ import annotations

import re

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    dev_app_config_fixture,
    playwright_expect,
    scheme_fixture,
    tab_fixture,
)
from sqlalchemy import select

from webapp.db import db
from webapp.demo import load_demo
from webapp.models import Conversation

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()

# Every card footer: whether its children are on one line (every one's box overlaps every
# other's vertically), whether any reaches past the footer's right edge, and whether the
# duration is shown whole.
FOOTERS = """() => [...document.querySelectorAll('.call-foot')].map(foot => {
  const box = foot.getBoundingClientRect();
  const kids = [...foot.children].filter(k => k.getBoundingClientRect().width > 0
    && !k.classList.contains('spacer'));
  const dur = foot.querySelector('.dur');
  return {
    call: foot.closest('.call-card').id,
    oneLine: Math.max(...kids.map(k => k.getBoundingClientRect().top))
      < Math.min(...kids.map(k => k.getBoundingClientRect().bottom)),
    height: Math.round(box.height),
    outside: kids.some(k => k.getBoundingClientRect().right > box.right + 0.5),
    durCut: dur ? dur.scrollWidth > dur.clientWidth + 0.5 : false,
  };
})"""


@pytest.fixture
def demo(app) -> dict[str, int]:
    """The demo, as `make run` loads it: conversation row ids by external id."""
    load_demo(app, "default")
    with app.app_context():
        return dict(db.session.execute(select(Conversation.external_id, Conversation.id)).all())  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [1280, 1024])
def test_call_card_footers_stay_on_one_line(tab, demo, scheme, width):
    page, watch = tab
    page.set_viewport_size({"width": width, "height": 900})
    # Long badges ("would be compacted"), parallel cards, cost shares and errors.
    for name in ("demo-revenue-research", "demo-tool-errors", "demo-crm-redaction"):
        page.goto(f"/conversations/{demo[name]}")
        expect(page.locator(".call-card").first).to_be_visible()
        footers = page.evaluate(FOOTERS)
        assert footers, name
        for foot in footers:
            assert foot["oneLine"], (name, foot)
            assert foot["height"] < 30, (name, foot)
            assert not foot["outside"] and not foot["durCut"], (name, foot)
        watch.shot(f"small-cards-{name.removeprefix('demo-')}-{width}-{scheme}")
    # With the call detail open beside the timeline, the cards are narrower.
    page.goto(f"/conversations/{demo['demo-revenue-research']}")
    page.locator(".call-card").first.click()
    expect(page.locator("#detail .detail")).to_be_visible()
    for foot in page.evaluate(FOOTERS):
        assert foot["oneLine"] and not foot["outside"] and not foot["durCut"], foot
    watch.shot(f"small-cards-detail-{width}-{scheme}", full_page=False)


def test_freshness_windows_read_in_human_units(tab, demo, scheme):
    page, watch = tab
    page.goto(f"/conversations/{demo['demo-revenue-research']}")
    expect(page.locator(".meta-line")).to_contain_text("freshness 45 d")
    page.goto(f"/conversations/{demo['demo-order-status']}")
    expect(page.locator(".meta-line")).to_contain_text("freshness 5 min")
    watch.shot(f"small-freshness-conversation-{scheme}", full_page=False)
    page.goto("/settings")
    channels = page.locator("table", has=page.locator("td", has_text="live-dashboard"))
    expect(channels.locator("tr", has_text="support-bot")).to_contain_text("45 d")
    expect(channels.locator("tr", has_text="orders")).to_contain_text("5 min")
    expect(channels.locator("tr", has_text="live-dashboard")).to_contain_text("30 s")
    expect(channels).not_to_contain_text("3888000")
    channels.scroll_into_view_if_needed()
    watch.shot(f"small-freshness-settings-{scheme}", full_page=False)


def test_the_turn_index_shows_first_words(tab, demo, scheme):
    page, watch = tab
    page.goto(f"/conversations/{demo['demo-revenue-research']}")
    page.click(".turn-index summary")
    lines = page.locator(".turn-grid li")
    expect(lines).to_have_count(2)
    expect(lines.nth(0)).to_contain_text("How did revenue develop last quarter?")
    expect(lines.nth(1)).to_contain_text("And what about margins?")
    watch.shot(f"small-turn-index-{scheme}", full_page=False)
    # The whole line opens its turn, not only the number.
    # (the link covers the line: a click on the words lands on it, hence force)
    lines.nth(1).locator(".turn-words").click(force=True)
    expect(page).to_have_url(re.compile(r"#turn-2$"))
    expect(page.locator("#turn-2")).to_be_in_viewport()


def test_the_replay_preview_has_one_comparison_button(tab, demo, scheme):
    page, watch = tab
    page.goto(f"/conversations/{demo['demo-weather-parallel']}/replay")
    expect(page.locator("#replay-result .replay-asof")).to_contain_text("freshness 45 d")
    compare = page.locator("a[href*='/replay/compare']")
    expect(compare).to_have_count(1)
    expect(compare).to_have_text("Compare with another policy")
    expect(page.locator("select[name=freshness] option").first).to_have_text("Configured (45 d)")
    watch.shot(f"small-replay-{scheme}", full_page=False)
    # It follows the options: after a change it starts the comparison from them.
    page.select_option("select[name=persistence]", "per-service-call")
    expect(compare).to_have_attribute("href", re.compile(r"a\.persistence=per-service-call"))
    compare.click()
    expect(page).to_have_url(re.compile(r"/replay/compare\?.*a\.persistence=per-service-call"))
