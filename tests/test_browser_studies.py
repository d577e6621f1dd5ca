"""A study in Chromium, light and dark (issue 25, items 5 and 7): the page shows the study
running, its progress advances in place (polled, no page load) as the queue is worked, then the
report with the categories and the conversations that differ, linked to their runs; a second
study is cancelled from its page. The fake provider is on loopback (tests/fake_providers.py).

Marked ``browser`` (see tests/browser_support.py). Screenshots go to
``test-artifacts/studies-*.png`` for a person to look at.
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
from runs_support import RUN_CONFIG, work
from studies_support import seed, start

from webapp.db import db
from webapp.services import studies
from webapp.services.run_worker import RunWorker

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()


@pytest.fixture
def app_config():
    return {**RUN_CONFIG, "DEV": True}


def test_a_studys_progress_and_report(app, tab, project_key, fake, scheme):
    page, watch = tab
    seed(app, project_key.project_id, fake)
    study_id = start(app, project_key.project_id)
    page.goto(f"/studies/{study_id}")
    part = page.locator("#study-progress")
    expect(part).to_have_attribute("data-study-status", "preparing")
    expect(part).to_contain_text("0 of 8 runs done")
    page.evaluate("() => { window.__sameDocument = true }")
    watch.shot(f"studies-running-{scheme}")

    with app.app_context():  # half the runs: the page shows it without a reload
        worker = RunWorker(threads=1)
        for _ in range(4):
            assert worker.step()
    expect(part).to_contain_text("4 of 8 runs done")
    watch.shot(f"studies-halfway-{scheme}", full_page=False)

    assert work(app) == 4
    expect(part).to_have_attribute("data-study-status", "succeeded")
    expect(part.locator(".study-agreement")).to_contain_text("0 of 4")
    expect(part.locator(".study-categories")).to_contain_text("Answered instead of calling")
    expect(part.locator(".study-differing tbody tr")).to_have_count(4)
    assert page.evaluate("() => window.__sameDocument") is True
    watch.shot(f"studies-report-{scheme}")

    part.locator(".study-differing a").first.click()
    expect(page.locator("h1")).to_contain_text("Run")


def test_cancel_a_study_from_its_page(app, tab, project_key, fake, scheme):
    page, watch = tab
    seed(app, project_key.project_id, fake)
    study_id = start(app, project_key.project_id, b="recorded")
    with app.app_context():  # its runs queued by the worker's preparation, none sent
        studies.prepare_next()
        db.session.remove()
    page.goto(f"/studies/{study_id}")
    part = page.locator("#study-progress")
    part.get_by_role("button", name="Cancel the study").click()
    expect(part).to_have_attribute("data-study-status", "cancelled")
    expect(part).to_contain_text("4 cancelled")
    expect(part.get_by_role("button", name="Cancel the study")).to_have_count(0)
    assert work(app) == 0 and fake.count() == 0
    watch.shot(f"studies-cancelled-{scheme}")
