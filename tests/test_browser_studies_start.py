"""Starting a study in Chromium, light and dark (issue 25, item 5): the calls explorer filtered
to one tool, "Study these conversations", the form with that filter, the estimate before
anything starts, a spending cap that refuses it (said plainly, no start button), then a cap
that allows it, Start, the study's page with its progress and, once the run worker has sent
its runs to the DEV scripted demo model (no key, no network), the report.

Marked ``browser`` (see tests/browser_support.py). Screenshots go to
``test-artifacts/studies-start-*.png`` for a person to look at.
"""

from __future__ import annotations

import re

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    playwright_expect,
    scheme_fixture,
    tab_fixture,
)
from runs_support import RUN_CONFIG, orders_conversation, work
from studies_support import CIDS
from test_api_studies_calls import docs_conversation

from webapp.db import db
from webapp.ingest.transaction import Write, run_write
from webapp.models import Project
from webapp.replay import scripted_model
from webapp.services.model_connections import (
    ConnectionDraft,
    prepare_connection,
    store_connection,
)
from webapp.services.providers import SCRIPTED_BASE_URL

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()
CONNECTION = "scripted-demo"


@pytest.fixture
def app_config():
    return {**RUN_CONFIG, "DEV": True}


def seed(app, project_id: int) -> None:
    """Four orders conversations and one that searched the docs; the scripted demo model's
    connection, as `toolscope demo` adds it; a price for it, so a cap can hold."""
    for cid in CIDS:
        orders_conversation(app, project_id, cid)
    docs_conversation(app, project_id)
    with app.app_context():
        draft = ConnectionDraft(
            name=CONNECTION,
            kind="openai",
            base_url=SCRIPTED_BASE_URL,
            default_model=scripted_model.MODEL,
        )
        values = prepare_connection(draft)
        db.session.commit()
        run_write(Write(store_connection, (project_id, values)))
        db.session.get(Project, project_id).price_overrides = {
            scripted_model.MODEL: {"input_per_mtok": "1", "output_per_mtok": "2"}
        }
        db.session.commit()
        db.session.remove()


def finish(app) -> int:
    sent = total = work(app)
    while sent:
        sent = work(app)
        total += sent
    return total


def test_study_the_explorers_conversations(app, tab, project_key, scheme):
    page, watch = tab
    seed(app, project_key.project_id)
    page.goto("/calls?tool=lookup_order")
    expect(page.locator(".list-total")).to_contain_text("8 calls match")
    watch.shot(f"studies-start-calls-{scheme}", full_page=False)
    page.get_by_role("link", name="Study these conversations").click()

    form = page.locator("#study-form")
    expect(form).to_be_visible()
    expect(form.locator('input[name="selection"][value="calls"]')).to_be_checked()
    expect(form.locator('select[name="calls.tool"]')).to_have_value("lookup_order")
    expect(form.locator('textarea[name="ids"]')).to_be_hidden()  # the other ways are hidden
    expect(form.locator('select[name="connection"]')).to_have_value(CONNECTION)
    form.locator('input[name="as_of"]').fill("turn:2")

    # A cap below the estimate: refused, said so, nothing to start.
    form.locator('input[name="max_cost_usd"]').fill("0.0001")
    form.get_by_role("button", name="Estimate the cost").click()
    preview = page.locator("#study-preview")
    refusal = preview.get_by_role("alert")
    expect(refusal).to_contain_text("over your spending cap")
    expect(preview.locator(".study-stats")).to_contain_text("8")
    expect(preview.get_by_role("button", name="Start the study")).to_have_count(0)
    page.evaluate("() => window.scrollTo(0, 0)")  # the sticky bar at the top of the shot
    watch.shot(f"studies-start-refused-{scheme}")

    # B becomes what the agent recorded: its options are hidden, and it is not sent.
    form.locator('select[name="b.preset"]').select_option("recorded")
    expect(form.locator(".variant-b .variant-sent")).to_be_hidden()
    expect(form.locator(".variant-b .variant-recorded")).to_be_visible()
    form.locator('select[name="b.preset"]').select_option("freshness_off")

    form.locator('input[name="max_cost_usd"]').fill("5")
    form.get_by_role("button", name="Estimate the cost").click()
    expect(preview.locator(".study-cap-ok")).to_contain_text("Within your spending cap of $5")
    stats = preview.locator(".study-stats .stat")
    expect(stats.nth(0)).to_contain_text("4")  # docs-1 holds no lookup_order call
    expect(stats.nth(1)).to_contain_text("8")
    start = preview.get_by_role("button", name="Start the study: 8 runs")
    expect(start).to_be_visible()
    page.evaluate("() => window.scrollTo(0, 0)")  # the sticky bar at the top of the shot
    watch.shot(f"studies-start-estimate-{scheme}")

    start.click()
    expect(page).to_have_url(re.compile(r"/studies/study_"))
    part = page.locator("#study-progress")
    expect(part).to_contain_text("runs done")
    expect(page.locator(".crumbs a")).to_have_text("Studies")
    expect(page.locator(".meta-line a")).to_have_text("calls that match tool lookup_order")
    watch.shot(f"studies-start-started-{scheme}")

    assert finish(app) == 8
    expect(part).to_have_attribute("data-study-status", "succeeded")
    expect(part.locator(".study-agreement")).to_contain_text("of 4")
    watch.shot(f"studies-start-report-{scheme}")

    page.get_by_role("link", name="Studies", exact=True).first.click()
    rows = page.locator(".study-list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("by calls")
    expect(page.locator("details#start")).not_to_have_attribute("open", "")
    watch.shot(f"studies-start-list-{scheme}")
