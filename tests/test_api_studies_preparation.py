"""A study's runs are prepared by the run worker, not in the POST (issue 25, item 5): the
POST stores the study `preparing` with its estimate; the worker prepares its conversations in
batches, each stored once even when a worker stops mid-batch or two race; cancel during the
preparation stops it; a conversation whose replay cannot be built gets a failed run that says
why. SQLite and PostgreSQL (the `app` fixture)."""

from __future__ import annotations

import factories
import pytest
import sqlalchemy as sa
from runs_support import RUN_CONFIG, T0, work
from studies_support import CIDS, FRESH, STALE, seed, start

from webapp.db import db
from webapp.ingest.transaction import Write, run_write
from webapp.models import Conversation, ModelRun, Study
from webapp.services import studies
from webapp.services.run_worker import RunWorker


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


def runs_of(app, study_id):
    """(conversation row id, variant, status) of the study's runs."""
    with app.app_context():
        rows = db.session.execute(
            sa.select(ModelRun.conversation_id, ModelRun.variant, ModelRun.status).where(
                ModelRun.study_id == study_id
            )
        ).all()
        db.session.remove()
    return sorted(tuple(r) for r in rows)


def study_row(app, study_id):
    with app.app_context():
        row = db.session.get(Study, study_id)
        status, prepared = row.status, row.prepared
        db.session.remove()
    return status, prepared


def test_the_post_stores_the_study_and_the_worker_prepares_its_runs(app, client, project_key, fake):
    seed(app, project_key.project_id, fake)
    body = {
        "connection": "oa",
        "conversations": list(CIDS),
        "variants": {"a": STALE, "b": FRESH},
    }
    response = client.post("/api/v1/studies", json=body, headers=project_key.headers)
    assert response.status_code == 202, response.get_json()
    study = response.get_json()
    assert study["status"] == "preparing" and study["estimate"]["runs"] == 8
    assert study["progress"]["total"] == 8 and study["progress"]["prepared"] == 0
    assert runs_of(app, study["id"]) == []  # nothing built in the request beyond the estimate

    # Two conversations a step: after the first, four runs are queued and two prepared.
    with app.app_context():
        assert studies.prepare_next(batch=2) == study["id"]
        db.session.remove()
    assert study_row(app, study["id"]) == ("preparing", 2)
    assert [r[2] for r in runs_of(app, study["id"])] == ["queued"] * 4
    seen = client.get(f"/api/v1/studies/{study['id']}", headers=project_key.headers).get_json()
    assert seen["progress"]["prepared"] == 2 and seen["progress"]["queued"] == 4

    assert RunWorker(threads=1, prepare_batch=2).run_until_idle(app) == 8
    assert fake.count() == 8
    done = client.get(f"/api/v1/studies/{study['id']}", headers=project_key.headers).get_json()
    assert done["status"] == "succeeded" and done["progress"]["prepared"] == 4
    assert done["report"]["compared"] == 4


def test_a_batch_stored_late_or_twice_queues_nothing_twice(app, project_key, fake):
    seed(app, project_key.project_id, fake)
    study_id = start(app, project_key.project_id)
    # A worker reads the study and builds the first batch, then stops before storing it
    # (killed, or slow): nothing of it is stored, the count stays.
    with app.app_context():
        row = db.session.get(Study, study_id)
        stale = studies._prepare_runs(
            project_key.project_id, study_id, row.spec, list(CIDS[:2]), studies.utcnow()
        )
        db.session.remove()
    assert study_row(app, study_id) == ("preparing", 0)
    # The next worker prepares the same batch and stores it.
    with app.app_context():
        studies.prepare_next(batch=2)
        db.session.remove()
    assert study_row(app, study_id) == ("preparing", 2)
    # The first worker's write comes late: refused (the count moved on), nothing added.
    with app.app_context():
        assert not run_write(Write(studies._store_batch, (study_id, 0, 2, False, stale)))
        # Even stored past the count's condition, a conversation's run cannot be queued twice.
        with pytest.raises(sa.exc.IntegrityError):
            studies.model_runs.store_run(stale[0])
        db.session.rollback()
        db.session.remove()
    assert len(runs_of(app, study_id)) == 4

    assert work(app) == 8 and fake.count() == 8
    runs = runs_of(app, study_id)
    assert len(runs) == len({(c, v) for c, v, _ in runs}) == 8
    assert {s for _, _, s in runs} == {"succeeded"}
    assert study_row(app, study_id)[0] == "succeeded"


def test_cancelled_while_preparing(app, client, project_key, fake):
    seed(app, project_key.project_id, fake)
    study_id = start(app, project_key.project_id)
    with app.app_context():
        studies.prepare_next(batch=1)  # one conversation prepared: two runs queued
        db.session.remove()
    response = client.post(f"/api/v1/studies/{study_id}/cancel", headers=project_key.headers)
    assert response.status_code == 200, response.get_json()
    study = response.get_json()
    assert study["status"] == "cancelled" and study["report"] is not None
    # The queued runs are cancelled, the rest never prepared, nothing sent.
    assert work(app) == 0 and fake.count() == 0
    assert [r[2] for r in runs_of(app, study_id)] == ["cancelled", "cancelled"]
    with app.app_context():
        assert studies.prepare_next(batch=4) is None
        db.session.remove()
    assert study_row(app, study_id) == ("cancelled", 1)
    assert study["report"]["not_compared"] == 4


def test_refused_over_the_cap_stores_nothing(app, client, project_key, fake):
    seed(app, project_key.project_id, fake)
    body = {
        "connection": "oa",
        "conversations": list(CIDS),
        "variants": {"a": STALE, "b": FRESH},
        "max_cost_usd": 0.000001,
    }
    response = client.post("/api/v1/studies", json=body, headers=project_key.headers)
    assert response.status_code == 422, response.get_json()
    assert response.get_json()["error"]["details"][0]["estimate"]["runs"] == 8
    with app.app_context():
        assert db.session.query(Study).count() == 0 and db.session.query(ModelRun).count() == 0
        db.session.remove()
    assert work(app) == 0 and fake.count() == 0


def test_a_conversation_whose_replay_cannot_be_built_gets_a_failed_run(app, project_key, fake):
    seed(app, project_key.project_id, fake)
    # A conversation of one turn: turn 2 does not exist there (the first conversation is
    # the probe, which has it).
    with app.app_context():
        short = factories.conversation(project_key.project_id, "short-1", title="one turn")
        factories.message(short, "short-1-u1", "user", "hello", at=T0)
        factories.commit()
        db.session.remove()
    study_id = start(app, project_key.project_id, b="recorded", cids=(CIDS[0], "short-1"))
    assert work(app) == 1 and fake.count() == 1
    with app.app_context():
        failed = db.session.execute(
            sa.select(ModelRun.error_kind, ModelRun.error_message).where(
                ModelRun.study_id == study_id, ModelRun.status == "failed"
            )
        ).all()
        db.session.remove()
    assert len(failed) == 1 and failed[0][0] == "replay" and "turn" in failed[0][1]
    status, _ = study_row(app, study_id)
    assert status == "succeeded"


def test_each_conversation_is_read_once_for_all_the_variants(app, project_key, fake, count_queries):
    """Preparing a study of two variants reads each conversation's calls once, not once per
    variant: the variants differ in how the history is replayed, not in what it is."""
    from webapp.queries.conversations import find_conversations
    from webapp.services import replay_answer

    seed(app, project_key.project_id, fake)
    study_id = start(app, project_key.project_id)
    with app.app_context():
        first = db.session.scalar(sa.select(sa.func.min(Conversation.id)))
        one = find_conversations(project_key.project_id, [first])[0]
        with count_queries() as single:
            replay_answer.load(one)
        db.session.remove()
    with count_queries() as queries, app.app_context():
        assert studies.prepare_next(batch=len(CIDS)) == study_id
        db.session.remove()
    per_load = sum("FROM tool_invocation" in s for s in single.statements)
    assert per_load > 0
    assert sum("FROM tool_invocation" in s for s in queries.statements) == per_load * len(CIDS)
