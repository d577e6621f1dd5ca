"""Studies over the API (issue 25, item 5): many conversations sent under two variants through
the real SDKs to the fake providers (tests/fake_providers.py), the report's agreement counts
and categories, the estimate and the spending cap, cancel halfway, the concurrency bound, a
429 that backs the study off, tenancy. SQLite and PostgreSQL (the `app` fixture)."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest
from fake_providers import FakeProviders
from hypothesis import given
from hypothesis import strategies as st
from runs_support import RUN_CONFIG, connect_fake, orders_conversation, work

from webapp.api.studies import StudyOut
from webapp.db import db
from webapp.models import ModelRun, Project
from webapp.replay.next_action import NextAction, compare
from webapp.services import model_runs, studies
from webapp.services.run_worker import RunWorker
from webapp.services.studies import make_report

CIDS = ("orders-1", "orders-2", "orders-3", "orders-4")
# At turn 2 the first lookup's result is an hour old: with the default freshness it is left out
# and the scripted model calls lookup_order again (as the agent did); with freshness off it is
# there and the model answers.
STALE = {"as_of": "turn:2"}
FRESH = {"as_of": "turn:2", "freshness": "off"}
PRICES = {"scripted*": {"input_per_mtok": "1", "output_per_mtok": "2"}}


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG, STUDY_BACKOFF_SECONDS=1.0, STUDY_RATE_LIMIT_REQUEUES=2)


@pytest.fixture
def orders(app, project_key, fake):
    for cid in CIDS:
        orders_conversation(app, project_key.project_id, cid)
    connect_fake(app, project_key.project_id, fake)
    with app.app_context():
        db.session.get(Project, project_key.project_id).price_overrides = PRICES
        db.session.commit()
        db.session.remove()
    return project_key


def refused(response, status, text):
    """An error document with this status whose message says ``text``."""
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert text in error["message"], error
    return error


def post_study(client, key, **body):
    body.setdefault("connection", "oa")
    body.setdefault("conversations", list(CIDS))
    return client.post("/api/v1/studies", json=body, headers=key.headers)


def get_study(client, key, study_id):
    response = client.get(f"/api/v1/studies/{study_id}", headers=key.headers)
    assert response.status_code == 200, response.get_json()
    document = response.get_json()
    StudyOut.model_validate(document)
    return document


def statuses(app, study_id):
    with app.app_context():
        rows = db.session.query(ModelRun.status).filter(ModelRun.study_id == study_id).all()
        db.session.remove()
    return sorted(r[0] for r in rows)


def test_a_study_against_the_recorded_actions_and_between_two_policies(app, client, orders, fake):
    # a: the default freshness (calls again, as the agent did); b: what the agent recorded.
    response = post_study(client, orders, variants={"a": STALE, "b": "recorded"})
    assert response.status_code == 202, response.get_json()
    study = response.get_json()
    StudyOut.model_validate(study)
    assert response.headers["Location"] == f"/api/v1/studies/{study['id']}"
    # Answered before any replay but the first is built: the run worker prepares the runs.
    assert study["status"] == "preparing" and fake.count() == 0  # nothing waited on the model
    estimate = study["estimate"]
    assert estimate["runs"] == 4 and estimate["conversations"] == 4
    assert estimate["input_tokens"] > 0 and Decimal(estimate["cost_usd"]) > 0
    assert study["progress"] == {
        "total": 4,
        "prepared": 0,
        "done": 0,
        "queued": 0,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 0,
        "cost_usd": "0",
    }
    assert work(app) == 4 and fake.count() == 4
    done = get_study(client, orders, study["id"])
    assert done["status"] == "succeeded"
    report = done["report"]
    assert report["against"] == "recorded"
    assert (report["compared"], report["agree"], report["differ"]) == (4, 4, 0)
    assert report["categories"] == [{"category": "same_calls", "label": "Same calls", "count": 4}]
    assert report["variants"]["a"]["succeeded"] == 4 and "b" not in report["variants"]
    assert Decimal(report["variants"]["a"]["cost_usd"]) == Decimal(done["progress"]["cost_usd"]) > 0

    # a: stale result left out (calls); b: freshness off (answers) on two conversations.
    response = post_study(
        client, orders, conversations=["orders-1", "orders-2"], variants={"a": STALE, "b": FRESH}
    )
    assert response.status_code == 202, response.get_json()
    second = response.get_json()
    # a's requests are the first study's: answered from the stored runs, nobody pays twice.
    assert work(app) == 2 and fake.count() == 6
    report = get_study(client, orders, second["id"])["report"]
    assert (report["compared"], report["agree"], report["differ"]) == (2, 0, 2)
    assert report["categories"] == [
        {
            "category": "answered_instead_of_calling",
            "label": "Answered instead of calling",
            "count": 2,
        }
    ]
    assert [d["conversation"] for d in report["differing"]] == ["orders-1", "orders-2"]
    for differing in report["differing"]:
        for variant in ("a", "b"):
            run = client.get(f"/api/v1/runs/{differing['runs'][variant]}", headers=orders.headers)
            assert run.get_json()["study_id"] == second["id"]
            assert run.get_json()["variant"] == variant
    assert report["variants"]["a"]["cost_usd"] == "0"  # from the cache
    assert Decimal(report["variants"]["b"]["cost_usd"]) > 0


def test_the_conversation_lists_filters_pick_the_conversations(app, client, orders, fake):
    response = post_study(
        client, orders, conversations={"q": "orders-3"}, variants={"a": STALE, "b": "recorded"}
    )
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["conversations"] == 1
    assert work(app) == 1
    none = post_study(
        client, orders, conversations={"q": "nothing-like-it"}, variants={"a": STALE, "b": FRESH}
    )
    refused(none, 404, "filters match no conversation")


def test_refused_over_the_cap_before_anything_starts(app, client, orders, fake):
    response = post_study(
        client, orders, variants={"a": STALE, "b": FRESH}, max_cost_usd="0.000001"
    )
    refused(response, 422, "over the spending cap $0.000001")
    details = response.get_json()["error"]["details"][0]
    assert details["estimate"]["runs"] == 8
    assert Decimal(details["estimate"]["cost_usd"]) > Decimal("0.000001")
    with app.app_context():
        assert db.session.query(ModelRun).count() == 0
        db.session.remove()
    assert work(app) == 0 and fake.count() == 0
    # Under the cap it starts.
    ok = post_study(client, orders, variants={"a": STALE, "b": FRESH}, max_cost_usd="1")
    assert ok.status_code == 202, ok.get_json()


def test_a_study_stops_when_its_spend_reaches_the_cap(app, client, orders, fake):
    # Only answers cost: the estimate counts max_tokens (1) a run, the fake answers 12.
    with app.app_context():
        prices = {"scripted*": {"input_per_mtok": "0", "output_per_mtok": "1000"}}
        db.session.get(Project, orders.project_id).price_overrides = prices
        db.session.commit()
        db.session.remove()
    body = {"variants": {"a": STALE, "b": "recorded"}, "max_tokens": 1, "concurrency": 1}
    estimate = refused(post_study(client, orders, max_cost_usd="0", **body), 422, "over the")
    cap = estimate["details"][0]["estimate"]["cost_usd"]
    # Capped at its estimate it starts; the fake answers 12 output tokens where the estimate
    # counted one: the first run crosses the cap.
    response = post_study(client, orders, max_cost_usd=cap, **body)
    assert response.status_code == 202, response.get_json()
    study_id = response.get_json()["id"]
    executed = work(app)
    assert 1 <= executed < 4 and fake.count() == executed
    study = get_study(client, orders, study_id)
    assert study["status"] == "stopped" and "spending cap" in study["message"]
    spent = Decimal(study["progress"]["cost_usd"])
    # Stopped at the first run that crossed it (the runs cost alike).
    assert spent >= Decimal(cap) > spent * (executed - 1) / executed
    progress = study["progress"]
    assert (progress["succeeded"], progress["cancelled"]) == (executed, 4 - executed)
    assert study["report"]["compared"] == executed


def test_cancelled_halfway(app, client, orders, fake):
    response = post_study(client, orders, variants={"a": STALE, "b": FRESH}, concurrency=1)
    study_id = response.get_json()["id"]
    worker = RunWorker(threads=1)
    with app.app_context():
        assert worker.step() and worker.step() and worker.step()
        db.session.remove()
    cancelled = client.post(f"/api/v1/studies/{study_id}/cancel", headers=orders.headers)
    assert cancelled.status_code == 200, cancelled.get_json()
    StudyOut.model_validate(cancelled.get_json())
    assert cancelled.get_json()["status"] == "cancelled"
    assert work(app) == 0 and fake.count() == 3  # no run executed after the cancel
    study = get_study(client, orders, study_id)
    progress = study["progress"]
    assert (progress["succeeded"], progress["cancelled"], progress["queued"]) == (3, 5, 0)
    assert progress["total"] == 8 == progress["done"]
    assert statuses(app, study_id) == ["cancelled"] * 5 + ["succeeded"] * 3
    report = study["report"]
    assert report["compared"] + report["not_compared"] == 4
    assert report["variants"]["a"]["runs"] + report["variants"]["b"]["runs"] == 8
    again = client.post(f"/api/v1/studies/{study_id}/cancel", headers=orders.headers)
    refused(again, 409, "has ended (cancelled)")


def test_runs_claimed_before_a_cancel_are_not_sent(app, client, orders, fake):
    """A worker claims several runs in one write and hands them to its threads one by one: a
    cancel in between holds for the claimed runs not sent yet, as for the queued ones."""
    response = post_study(client, orders, variants={"a": STALE, "b": FRESH}, concurrency=4)
    study_id = response.get_json()["id"]
    with app.app_context():
        while studies.prepare_next(50) is not None:
            pass
        claimed = model_runs.claim_batch("w-1", 3, 60.0)
        db.session.remove()
    assert len(claimed) == 3
    cancelled = client.post(f"/api/v1/studies/{study_id}/cancel", headers=orders.headers)
    assert cancelled.status_code == 200, cancelled.get_json()
    with app.app_context():
        outcomes = [model_runs.execute(run_id, "w-1") for run_id, _study in claimed]
        db.session.remove()
    assert [(o.status, o.stored) for o in outcomes] == [("cancelled", True)] * 3
    assert fake.count() == 0
    assert statuses(app, study_id) == ["cancelled"] * 8


def test_the_worker_respects_the_studys_concurrency(app, client, project_key):
    fake = FakeProviders(slow_seconds=0.3).start()
    try:
        for n in range(6):
            orders_conversation(app, project_key.project_id, f"slow-{n}")
        connect_fake(app, project_key.project_id, fake)
        response = client.post(
            "/api/v1/studies",
            json={
                "connection": "oa",
                "model": "scripted-slow",
                "conversations": [f"slow-{n}" for n in range(6)],
                "variants": {"a": STALE, "b": FRESH},
                "concurrency": 2,
            },
            headers=project_key.headers,
        )
        assert response.status_code == 202, response.get_json()
        study_id = response.get_json()["id"]
        worker = RunWorker(threads=5, poll_seconds=0.05)
        worker.start(app)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if get_study(client, project_key, study_id)["status"] not in (
                    "preparing",
                    "running",
                ):
                    break
                time.sleep(0.1)
        finally:
            worker.stop()
        study = get_study(client, project_key, study_id)
        assert study["status"] == "succeeded", study["progress"]
        assert fake.count() == 12 and study["progress"]["succeeded"] == 12
        # Five threads, but never more than two of the study's requests at once.
        assert fake.max_in_flight == 2
    finally:
        fake.stop()


def test_a_rate_limited_study_backs_off_instead_of_failing(app, client, orders, fake):
    response = post_study(
        client,
        orders,
        model="scripted-rate-limited",
        conversations=["orders-1"],
        variants={"a": STALE, "b": "recorded"},
    )
    study_id = response.get_json()["id"]
    worker = RunWorker(threads=1)
    assert worker.run_until_idle(app) == 1  # 429: queued again, the study backed off
    study = get_study(client, orders, study_id)
    assert study["status"] == "running" and study["progress"]["queued"] == 1
    assert study["backoff_until"] is not None
    assert worker.run_until_idle(app) == 0  # nothing is claimed while it backs off
    time.sleep(1.1)
    assert worker.run_until_idle(app) == 1  # attempt 2: limited again, backs off 2 s
    assert get_study(client, orders, study_id)["status"] == "running"
    time.sleep(2.1)
    # Attempt 3, over STUDY_RATE_LIMIT_REQUEUES: the run fails like any run, the study ends.
    assert worker.run_until_idle(app) == 1
    study = get_study(client, orders, study_id)
    assert study["status"] == "succeeded"
    assert study["progress"]["failed"] == 1 and fake.count() == 3
    assert study["report"]["not_compared"] == 1


def test_studies_are_the_projects_and_their_input_is_checked(
    app, client, orders, other_project_key
):
    response = post_study(client, orders, variants={"a": STALE, "b": "recorded"})
    study_id = response.get_json()["id"]
    other = client.get(f"/api/v1/studies/{study_id}", headers=other_project_key.headers)
    refused(other, 404, "no such study")
    cancel = client.post(f"/api/v1/studies/{study_id}/cancel", headers=other_project_key.headers)
    refused(cancel, 404, "no such study")
    refused(
        post_study(client, orders, conversations=["nope"], variants={"a": STALE, "b": FRESH}),
        404,
        "no such conversation",
    )
    refused(post_study(client, orders, variants={"a": "recorded", "b": STALE}), 422, "variants")
    refused(post_study(client, orders, variants={"a": STALE}), 422, "variants")
    refused(
        post_study(client, orders, variants={"a": {"as_of": "turn:9"}, "b": "recorded"}),
        404,
        "variants.a",
    )
    refused(
        post_study(client, orders, connection="nope", variants={"a": STALE, "b": "recorded"}),
        404,
        "connection",
    )
    refused(
        post_study(client, orders, variants={"a": STALE, "b": "recorded"}, concurrency=0),
        422,
        "concurrency",
    )


ACTIONS = st.sampled_from(
    [
        {"kind": "calls", "text": None, "calls": [{"name": "f", "arguments": {"x": 1}}]},
        {"kind": "calls", "text": None, "calls": [{"name": "f", "arguments": {"x": 2}}]},
        {"kind": "calls", "text": None, "calls": [{"name": "g", "arguments": {}}]},
        {"kind": "answer", "text": "yes", "calls": []},
        {"kind": "answer", "text": "no", "calls": []},
        {"kind": "empty", "text": None, "calls": []},
    ]
)
STATUS = st.sampled_from(["succeeded", "succeeded", "failed", "cancelled"])


@given(st.lists(st.tuples(ACTIONS, ACTIONS, STATUS, STATUS), max_size=12))
def test_the_report_adds_up(pairs):
    """Every conversation is compared or not; the categories add up to the compared ones, the
    agreeing ones are exactly those whose actions compare equal, each differing one is listed
    with both runs."""
    rows, cids = [], []
    for n, (a, b, status_a, status_b) in enumerate(pairs):
        cid = f"c{n}"
        cids.append(cid)
        for variant, action, status in (("a", a, status_a), ("b", b, status_b)):
            rows.append(
                {
                    "id": f"run_{cid}{variant}",
                    "conversation": cid,
                    "variant": variant,
                    "status": status,
                    "next_action": action,
                    "comparison": None,
                    "input_tokens": 3,
                    "output_tokens": 1,
                    "cost_usd": Decimal("0.5"),
                    "error_kind": None,
                }
            )
    report = make_report({"conversations": cids, "variants": {"a": {}, "b": {}}}, rows)
    assert report["compared"] + report["not_compared"] == len(pairs) == report["conversations"]
    assert sum(c["count"] for c in report["categories"]) == report["compared"]
    assert report["agree"] + report["differ"] == report["compared"]
    assert len(report["differing"]) == report["differ"]
    both = [(a, b) for a, b, sa, sb in pairs if sa == sb == "succeeded"]
    assert report["agree"] == sum(
        1
        for a, b in both
        if compare(NextAction.from_json(b), NextAction.from_json(a)).category
        in ("same_calls", "same_answer")
    )
    for differing in report["differing"]:
        assert set(differing["runs"]) == {"a", "b"}
    if pairs:
        assert report["variants"]["a"]["runs"] == len(pairs)
        assert Decimal(report["variants"]["b"]["cost_usd"]) == Decimal("0.5") * len(pairs)
