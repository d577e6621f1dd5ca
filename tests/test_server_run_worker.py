"""The run worker as it runs beside a server (issue 25, items 2 and 7): `toolscope runs work`
processes on the test's database, on SQLite and PostgreSQL. A worker killed while the provider
holds its request leaves a run that is retried or failed once its lease runs out, never left
`running`; two workers racing over the same queue execute every run exactly once (counted at
the fake provider), heartbeats keeping a slow run theirs beyond its lease."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from runs_support import CID, RUN_CONFIG, connect_fake, orders_conversation

from webapp.db import db, utcnow
from webapp.models import ModelRun
from webapp.services.run_worker import RunWorker

BIN = Path(sys.executable).parent
LEASE = 1.0


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


@pytest.fixture
def orders(app, project_key, fake):
    orders_conversation(app, project_key.project_id)
    connect_fake(app, project_key.project_id, fake)
    return project_key


def start_worker(app, tmp_path: Path, name: str, threads: int = 1) -> subprocess.Popen:
    env = {
        **os.environ,
        "TOOLSCOPE_DATABASE_URL": app.config["DATABASE_URL"],
        "TOOLSCOPE_SECRET_KEY": app.config["SECRET_KEY"],  # decrypts the connection's key
        "TOOLSCOPE_RUN_LEASE_SECONDS": str(LEASE),
        "TOOLSCOPE_MODEL_MAX_RETRIES": "0",
        "TOOLSCOPE_MODEL_TIMEOUT_SECONDS": "30",
    }
    with (tmp_path / f"{name}.log").open("wb") as log:  # the child keeps its own handle
        return subprocess.Popen(
            [BIN / "toolscope", "runs", "work", "--threads", str(threads)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def post(client, key, **body):
    body.setdefault("connection", "oa")
    response = client.post(f"/api/v1/conversations/{CID}/runs", json=body, headers=key.headers)
    assert response.status_code == 202, response.get_json()
    return response.get_json()["id"]


def runs(app) -> list[ModelRun]:
    with app.app_context():
        rows = list(db.session.query(ModelRun).order_by(ModelRun.created_at))
        db.session.expunge_all()
        db.session.remove()
    return rows


def wait_for(what: str, check, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("attempts", [2, 1])
def test_a_worker_killed_mid_run_leaves_a_run_that_is_retried_or_failed(
    app, client, orders, fake, tmp_path, attempts
):
    run_id = post(client, orders, model="scripted-hold")
    worker = start_worker(app, tmp_path, "killed")
    try:
        assert fake.wait_held(60), (tmp_path / "killed.log").read_text()
        [run] = runs(app)
        assert (run.status, run.attempts) == ("running", 1)
        worker.kill()  # SIGKILL: no clean-up, no last write
        worker.wait(10)
    finally:
        stop(worker)
    fake.release()  # the provider answers a request nobody waits for any more
    [run] = runs(app)
    assert run.status == "running"  # until its lease runs out
    wait_for("the lease to run out", lambda: runs(app)[0].lease_until < utcnow(), 30)

    recovered = RunWorker(threads=1, lease_seconds=LEASE, max_attempts=attempts)
    recovered.run_until_idle(app)
    [run] = runs(app)
    assert run.id == run_id
    if attempts == 2:
        assert (run.status, run.attempts, run.error_message) == ("succeeded", 2, None)
        assert run.next_action["kind"] == "calls"
        assert fake.count(model="scripted-hold") == 2
    else:
        assert (run.status, run.attempts, run.error_kind) == ("failed", 1, "interrupted")
        assert "stopped before it finished" in run.error_message
        assert run.finished_at is not None and run.lease_owner is None
        assert fake.count(model="scripted-hold") == 1


def test_two_workers_racing_execute_every_run_exactly_once(app, client, orders, fake, tmp_path):
    # Each run outlives its lease (LEASE) by half: only the heartbeats keep it its worker's.
    fake.slow_seconds = LEASE * 1.5
    n = 8
    questions = [f"question {k}" for k in range(n)]
    ids = [
        post(
            client,
            orders,
            model="scripted-slow",
            edits=[{"type": "append_user_message", "content": question}],
        )
        for question in questions
    ]
    workers = [start_worker(app, tmp_path, f"racer{k}", threads=2) for k in range(2)]
    try:

        def finished():
            rows = runs(app)
            return all(r.status in ("succeeded", "failed") for r in rows) and rows

        rows = wait_for("every run to finish", finished, 120)
    finally:
        for worker in workers:
            stop(worker)
    logs = "\n".join((tmp_path / f"racer{k}.log").read_text() for k in range(2))
    assert sorted(r.id for r in rows) == sorted(ids)
    assert {r.status for r in rows} == {"succeeded"}, [(r.id, r.error_message) for r in rows]
    assert [r.attempts for r in rows] == [1] * n, logs
    # Counted at the provider: each question asked once, nothing else asked.
    asked = Counter(
        m["content"] for r in fake.requests for m in r.body["messages"][-1:] if m["role"] == "user"
    )
    assert asked == Counter(questions)
    assert fake.count() == n


def test_an_idle_worker_takes_no_write_lock(app, sqlite_writer):
    # Another connection holds SQLite's write lock: an idle worker's look at the queue (and
    # for expired leases) still goes through, reading only.
    worker = RunWorker(threads=1)
    started = time.monotonic()
    assert worker.run_until_idle(app) == 0
    assert time.monotonic() - started < 5


def test_the_token_pass_process_sends_the_servers_runs(app, client, orders, fake, tmp_path):
    """Under gunicorn the master starts `python -m webapp.token_process`; it runs the run
    worker beside the pass (RUN_WORKERS threads), so runs are sent with no web worker waiting."""
    if not app.config["DATABASE_URL"].startswith("sqlite"):
        pytest.skip("the process is the same on PostgreSQL; the queue's tests run on both")
    from webapp import token_process

    run_id = post(client, orders)
    env = {
        **os.environ,
        token_process.ENV_DATABASE_URL: app.config["DATABASE_URL"],
        token_process.ENV_INTERVAL: "5",
        "TOOLSCOPE_SECRET_KEY": app.config["SECRET_KEY"],
        "TOOLSCOPE_RUN_WORKERS": "2",
    }
    with (tmp_path / "pass.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", token_process.MODULE],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        [run] = wait_for("the run to be sent", lambda: [r for r in runs(app) if r.finished_at])
    finally:
        stop(process)
    assert (run.id, run.status) == (run_id, "succeeded"), (tmp_path / "pass.log").read_text()
    assert fake.count() == 1


def test_toolscope_serve_sends_runs_from_a_thread_of_its_own(app, client, orders, fake, tmp_path):
    """`toolscope serve` runs the worker as threads of the server: a run posted over HTTP is
    sent without any other process."""
    if not app.config["DATABASE_URL"].startswith("sqlite"):
        pytest.skip("the threads are the same on PostgreSQL; the queue's tests run on both")
    import socket

    import requests

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "TOOLSCOPE_DATABASE_URL": app.config["DATABASE_URL"],
        "TOOLSCOPE_SECRET_KEY": app.config["SECRET_KEY"],
        "TOOLSCOPE_TOKEN_PASS_SECONDS": "0",
        "TOOLSCOPE_RUN_WORKERS": "1",
    }
    with (tmp_path / "serve.log").open("wb") as log:
        server = subprocess.Popen(
            [BIN / "toolscope", "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}/api/v1"
    try:

        def posted():
            try:
                return requests.post(
                    f"{base}/conversations/{CID}/runs",
                    json={"connection": "oa"},
                    headers=orders.headers,
                    timeout=10,
                )
            except requests.ConnectionError:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()
                return None

        response = wait_for("toolscope serve to answer", posted, 60)
        assert response.status_code == 202, response.text
        run_id = response.json()["id"]

        def done():
            run = requests.get(f"{base}/runs/{run_id}", headers=orders.headers, timeout=10)
            return run.json() if run.json()["status"] not in ("queued", "running") else None

        run = wait_for("the run to be sent", done, 60)
    finally:
        stop(server)
    assert run["status"] == "succeeded", run["error"]
    assert fake.count() == 1
