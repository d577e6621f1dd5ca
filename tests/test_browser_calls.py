"""The calls explorer and the delete flow in Chromium (Playwright), against the app served over
HTTP, in light and dark: search as you type, filters in the URL, infinite scroll, the jump to
the call in its conversation; deleting a conversation after its confirmation. SQLite only (the
HTML tests cover PostgreSQL). Screenshots go to ``test-artifacts/`` (not committed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import factories as f
import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    dev_app_config_fixture,
    playwright_expect,
    scheme_fixture,
    screenshot,
    tab_fixture,
)

from webapp.db import db

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()


def seed(app, project_id: int) -> dict[str, int]:
    """The support conversation, a failed call whose error says "upstream timeout", and enough
    calls for a second page."""
    now = datetime.now(UTC)
    with app.app_context():
        support = f.support_conversation(project_id)
        billing = f.conversation(
            project_id,
            "billing-7",
            title="Invoice INV-118 mismatch",
            channel_name="billing",
            at=now - timedelta(minutes=30),
        )
        msg = f.message(
            billing,
            "b1",
            "assistant",
            "Could not fetch it.",
            at=now - timedelta(minutes=30),
            status="failed",
        )
        failed = f.calls(
            msg,
            0,
            [
                f.Call(
                    "fetch_invoice",
                    {"invoice": "INV-118"},
                    "Error: upstream timeout after 30s (billing gateway)",
                    is_error=True,
                    started_ms=0,
                    duration_ms=30_000,
                ),
            ],
            at=now - timedelta(minutes=30),
        )[0]
        bulk = f.conversation(project_id, "bulk", title="Bulk lookups", at=now - timedelta(hours=2))
        for n in range(12):
            m = f.message(
                bulk, f"bulk-{n}", "assistant", None, at=now - timedelta(hours=2, minutes=n)
            )
            f.calls(
                m,
                0,
                [
                    f.Call(
                        "lookup",
                        {"n": n, "i": i},
                        f"row {n}-{i} " + "x" * (40 * i),
                        started_ms=0,
                        duration_ms=10 + n * i,
                    )
                    for i in range(5)
                ],
                at=now - timedelta(hours=2, minutes=n),
            )
        db.session.commit()
        return {"support": support.id, "billing": billing.id, "failed": failed.id}


def test_search_filter_scroll_and_jump_to_the_call(app, project_key, tab, scheme):
    page, _problems = tab
    ids = seed(app, project_key.project_id)
    page.goto("/calls")
    expect(page.locator("nav.nav a[aria-current=page]")).to_have_text("Calls")
    rows = page.locator("#call-rows tr.call-row")
    expect(rows).to_have_count(50)
    screenshot(page, f"calls-{scheme}", full_page=False)
    # Infinite scroll: the loader row brings the rest.
    page.locator("#call-rows tr.loader-row").scroll_into_view_if_needed()
    expect(rows).to_have_count(68)

    # Search as you type: the failed call, by the words of its error.
    page.locator("#calls-q").press_sequentially("upstream timeout gateway")
    expect(page).to_have_url(re.compile(r"q=upstream\+timeout\+gateway"))
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row.locator(".badge-error")).to_be_visible()
    screenshot(page, f"calls-search-{scheme}", full_page=False)

    # A filter goes into the URL too.
    page.select_option("select[name=status]", "error")
    expect(page).to_have_url(re.compile(r"status=error"))
    expect(rows).to_have_count(1)
    page.goto("/calls")
    page.select_option("select[name=sort]", "duration")
    expect(page).to_have_url(re.compile(r"sort=duration"))
    # fetch_invoice ties the support conversation's failed get_order at 30 s: equal durations
    # sort by id, newest first (once a duration-noise race on SQLite, see sql.duration_ms).
    expect(rows.first.locator(".call-tool a")).to_have_text("fetch_invoice")

    # The row leads to the call in its conversation.
    page.goto("/calls?q=upstream+timeout+gateway")
    page.locator("#call-rows tr.call-row .call-conv a").first.click()
    expect(page).to_have_url(re.compile(rf"/conversations/{ids['billing']}#call-{ids['failed']}$"))
    expect(page.locator(f"#call-{ids['failed']}")).to_be_visible()


def test_delete_a_conversation_after_confirming(app, project_key, tab, scheme):
    page, _problems = tab
    ids = seed(app, project_key.project_id)
    page.goto(f"/conversations/{ids['billing']}")
    box = page.locator("details.confirm-delete .confirm-box")
    expect(box).to_be_hidden()
    page.click("details.confirm-delete > summary")
    expect(box).to_be_visible()
    expect(box).to_contain_text("cannot be undone")
    screenshot(page, f"delete-confirm-{scheme}", full_page=False)
    page.click("text=Delete conversation")
    expect(page).to_have_url(re.compile(r"/conversations\?deleted=1$"))
    expect(page.locator(".notice")).to_contain_text("was deleted")
    expect(page.locator(f"#conv-{ids['billing']}")).to_have_count(0)
    expect(page.locator(f"#conv-{ids['support']}")).to_have_count(1)
    screenshot(page, f"delete-done-{scheme}", full_page=False)
    page.goto("/calls?q=upstream+timeout+gateway")
    expect(page.locator(".empty-row")).to_contain_text("No call matches")
