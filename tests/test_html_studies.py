"""A study's page (issue 25, item 5): progress while it runs (the part polls itself), cancel,
the report with links to the runs that differ, the JSON twin; another project's study is not
found. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from dashboard_support import HTMX, csrf_token, dashboard_fixture, page  # noqa: F401
from runs_support import RUN_CONFIG, work
from studies_support import seed, start

from webapp.api.studies import StudyOut


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


def test_progress_then_the_report(app, dashboard, project_key, fake):
    seed(app, project_key.project_id, fake)
    study_id = start(app, project_key.project_id)
    doc = page(dashboard.get(f"/studies/{study_id}"))
    part = doc.one("#study-progress")
    # Stored at once; the run worker prepares its runs (the page says how far it got).
    assert part.get("data-study-status") == "preparing"
    assert part.get("hx-get") == f"/studies/{study_id}/progress"  # it polls itself
    assert "0 of 8 runs done" in part.text
    assert "built the replays of 0 of 4 conversations" in part.one(".study-preparing").text
    assert doc.select("#study-progress form button")[0].text == "Cancel the study"
    assert "8 runs" in doc.one(".study-estimate").text

    assert work(app) == 8
    part = page(dashboard.get(f"/studies/{study_id}/progress", headers=HTMX)).one("#study-progress")
    assert part.get("data-study-status") == "succeeded" and part.get("hx-get") is None
    assert "0 of 4" in part.one(".study-agreement").text
    assert "Answered instead of calling" in part.one(".study-categories").text
    links = [a.get("href") for a in part.select(".study-differing a")]
    assert len(links) == 8 and all(href.startswith("/runs/run_") for href in links)
    assert not part.select("form")  # nothing left to cancel

    twin = dashboard.get(f"/studies/{study_id}.json")
    assert twin.status_code == 200
    StudyOut.model_validate(twin.get_json())
    assert twin.get_json()["report"]["differ"] == 4


def test_cancel_from_the_page(app, dashboard, project_key, other_project_key, fake):
    seed(app, project_key.project_id, fake)
    seed(app, other_project_key.project_id, fake, ("theirs-1",))
    study_id = start(app, project_key.project_id, concurrency=1)
    token = csrf_token(dashboard)
    response = dashboard.post(
        f"/studies/{study_id}/cancel", data={"csrf_token": token}, headers=HTMX
    )
    part = page(response).one("#study-progress")
    assert part.get("data-study-status") == "cancelled"
    assert "cancelled" in part.text  # while preparing: no run was queued, none is sent
    assert work(app) == 0 and fake.count() == 0
    # Without htmx: back to the page.
    again = dashboard.post(f"/studies/{study_id}/cancel", data={"csrf_token": token})
    assert again.status_code == 303 and again.headers["Location"].endswith(f"/studies/{study_id}")

    # Another project's study is not found, nor cancelled.
    theirs = start(app, other_project_key.project_id, cids=("theirs-1",))
    assert dashboard.get(f"/studies/{theirs}").status_code == 404
    assert dashboard.get(f"/studies/{theirs}.json").status_code == 404
    refused = dashboard.post(f"/studies/{theirs}/cancel", data={"csrf_token": token})
    assert refused.status_code == 404
    assert dashboard.get("/studies/study_nope").status_code == 404
    assert dashboard.get("/studies/study_nope.json").status_code == 404
