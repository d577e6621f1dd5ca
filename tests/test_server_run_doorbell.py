"""Under gunicorn a run starts at once (issue 25): the web worker that answers the POST rings
the doorbell (webapp/doorbell.py) and the run worker in the token pass process wakes, instead
of waiting for its poll. The poll is made 10 s long here, so only the bell can explain runs
that finish within a few seconds of their POST."""

from __future__ import annotations

import statistics
import threading
import time

import pytest
import requests
from runs_support import CID, RUN_CONFIG, connect_fake, orders_conversation
from server_support import procfile_server

POLL = 10.0
FAST = 4.0  # seconds from a POST to `succeeded`, generous for a loaded machine


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


@pytest.fixture
def server(app, project_key, fake):
    orders_conversation(app, project_key.project_id)
    connect_fake(app, project_key.project_id, fake)
    settings = {
        "TOOLSCOPE_DATABASE_URL": app.config["DATABASE_URL"],
        "TOOLSCOPE_SECRET_KEY": app.config["SECRET_KEY"],  # decrypts the connection's key
        "TOOLSCOPE_TOKEN_PASS_SECONDS": "0",  # the process runs for the run worker only
        "TOOLSCOPE_RUN_WORKERS": "2",
        "TOOLSCOPE_RUN_POLL_SECONDS": str(POLL),
        "TOOLSCOPE_MODEL_MAX_RETRIES": "0",
        "TOOLSCOPE_MODEL_TIMEOUT_SECONDS": "30",
    }
    with procfile_server(settings) as (_process, base, log):
        yield base, project_key, log


def send_run(base: str, key, seconds: float) -> float:
    """POST a run, then read it until it succeeded; the seconds in between."""
    headers = {**key.headers, "Connection": "close"}  # both web workers answer some
    started = time.monotonic()
    answer = requests.post(
        f"{base}/api/v1/conversations/{CID}/runs",
        json={"connection": "oa", "fresh": True},  # not answered from the cache of runs
        headers=headers,
        timeout=30,
    )
    assert answer.status_code == 202, answer.text
    url = f"{base}/api/v1/runs/{answer.json()['id']}"
    while time.monotonic() - started < seconds:
        run = requests.get(url, headers=key.headers, timeout=30).json()
        if run["status"] not in ("queued", "running"):
            assert run["status"] == "succeeded", run
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"the run did not finish within {seconds} s")


def test_a_run_posted_to_a_web_worker_starts_without_waiting_for_the_poll(server):
    base, key, log = server
    # The first run may be found by the worker's first look at the queue, as it starts.
    send_run(base, key, 120)
    time.sleep(0.5)  # both of its threads wait on their 10 s poll now
    took = [send_run(base, key, 3 * POLL) for _ in range(5)]
    log.seek(0)
    assert max(took) < FAST, (took, log.read()[-2000:])
    print(f"POST to succeeded: median {statistics.median(took) * 1000:.0f} ms, {took}")


def test_a_full_bell_never_blocks_a_request_and_one_wake_up_drains_it(monkeypatch):
    from webapp import doorbell

    monkeypatch.setattr(doorbell, "_bell", None)  # restored: no other test rings
    read_end = doorbell.make()
    started = time.monotonic()
    for _ in range(10_000):  # far beyond the socket's queue: the rings past it are dropped
        doorbell.ring()
    assert time.monotonic() - started < 5
    woken = threading.Event()
    stopping = threading.Event()
    thread = doorbell.listen(read_end.detach(), woken.set, stopping)  # the thread's fd now
    try:
        assert woken.wait(10)
        woken.clear()
        doorbell.ring()
        assert woken.wait(10)  # a ring after the drain still wakes
    finally:
        stopping.set()
        thread.join(5)
        doorbell._bell.close()
