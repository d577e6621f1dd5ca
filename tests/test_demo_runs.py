"""The demo shows runs without a key (issue 25, item 6): `toolscope demo` adds a connection to
the scripted demo model and queues a run and a fork of the order conversation; the run worker
of a DEV server sends them in process to the model the app serves, and the pages label its
answers. Outside DEV the same runs fail, saying why."""

from __future__ import annotations

import pytest
from dashboard_support import dashboard_fixture, page  # noqa: F401
from runs_support import RUN_CONFIG, work

from webapp.db import db
from webapp.demo import load_demo
from webapp.demo.runs import CONNECTION, CONVERSATION, FAILURE, add_demo_runs
from webapp.models import Conversation, ModelConnection, ModelRun
from webapp.replay import scripted_model

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _load(app):
    load_demo(app, "default")
    return add_demo_runs(app, "default")


@pytest.mark.parametrize("app_config", [{**RUN_CONFIG, "DEV": True}])
def test_the_demo_queues_a_run_and_a_fork_that_a_dev_server_answers(app, dashboard):
    report = _load(app)
    assert report.connection_added and len(report.runs) == 2
    again = add_demo_runs(app, "default")  # loading twice adds nothing
    assert not again.connection_added and again.runs is None
    assert work(app) == 2
    with app.app_context():
        assert db.session.query(ModelConnection).filter_by(name=CONNECTION).count() == 1
        conversation_id = (
            db.session.query(Conversation.id).filter_by(external_id=CONVERSATION).scalar()
        )
        runs = {r.id: r for r in db.session.query(ModelRun)}
        assert [r.status for r in runs.values()] == ["succeeded", "succeeded"]
        assert all(scripted_model.is_scripted(r.response) for r in runs.values())
        db.session.remove()
    run_id, fork_id = report.runs
    # The run at the start of the turn: it looks the order up, as the agent did (with other
    # arguments: a JSON diff).
    run = dashboard.get(f"/runs/{run_id}.json").get_json()
    assert [c["name"] for c in run["next_action"]["calls"]] == ["lookup_order"]
    assert run["comparison"]["category"] == "same_tools_other_arguments"
    # The fork: the lookup failed, so it looks again.
    fork = dashboard.get(f"/runs/{fork_id}.json").get_json()
    assert fork["edits"] == [
        {"type": "fail_call", "call_id": fork["edits"][0]["call_id"], "message": FAILURE}
    ]
    assert [c["name"] for c in fork["next_action"]["calls"]] == ["lookup_order"]
    # Listed on the conversation's page, labelled as the scripted demo model.
    doc = page(dashboard.get(f"/conversations/{conversation_id}"))
    rows = doc.select("#runs tbody tr")
    assert len(rows) == 2
    assert all("Scripted demo model" in row.text for row in rows)
    assert "1 edit" in rows[0].text  # newest first: the fork
    fork_page = page(dashboard.get(f"/runs/{fork_id}"))
    assert fork_page.select(".scripted-note") and fork_page.select(".run-edits li")


def test_outside_dev_the_scripted_model_is_not_reached_and_the_run_says_why(app, dashboard):
    report = _load(app)
    work(app)
    run = dashboard.get(f"/runs/{report.runs[0]}.json").get_json()
    assert run["status"] == "failed"
    assert run["error"]["kind"] == "connection"
    assert "DEV mode" in run["error"]["message"]
