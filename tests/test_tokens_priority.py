"""Background work at the lowest CPU priority without priority inversion (webapp/background.py):
the token pass and the tool-cost refresher run their CPU-heavy part (tokenizing, replays) at
nice 19, and take SQLite's write lock only from a thread at the process's priority. At nice 19
a busy machine gives a thread a sliver of a core; holding the lock there, the pass once made
the server's writers fail with "database is locked"."""

from __future__ import annotations

import os
import threading
import time

import pytest
from test_tokens_pass import pending, post_many

from tests.test_storage_attribution import _reset
from tests.test_storage_rollups import _apply
from webapp import background
from webapp.background import LOWEST_PRIORITY, LowPriorityLane
from webapp.ingest import token_pass
from webapp.services import attribution_refresh, attribution_store


def priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_a_lane_runs_work_at_the_lowest_priority_and_hands_back_its_result_or_error():
    lane = LowPriorityLane("probe")
    before = priority()
    assert lane.run(lambda a, b: (a + b, priority()), 1, 2) == (3, LOWEST_PRIORITY)
    assert priority() == before  # the caller keeps its own

    def fails():
        raise KeyError("from the lane")

    with pytest.raises(KeyError, match="from the lane"):
        lane.run(fails)
    # One thread, in order, and still serving after an error.
    threads = {lane.run(threading.get_ident) for _ in range(5)}
    assert len(threads) == 1 and threading.get_ident() not in threads
    # Closed, its thread ends (a stopped pass leaves none behind); used again, a new one.
    [thread] = [t for t in threading.enumerate() if t.name == "probe"]
    lane.close()
    thread.join(10)
    assert not thread.is_alive()
    assert lane.run(priority) == LOWEST_PRIORITY
    lane.close()


def test_the_token_pass_tokenizes_at_the_lowest_priority_and_writes_at_its_own(
    app, client, project_key, tmp_path, monkeypatch
):
    seen: dict[str, set[int]] = {"tokenize": set(), "write": set()}
    tokenize, begin_write = token_pass._all_params, token_pass.begin_write

    def recorded_tokenize(*args):
        seen["tokenize"].add(priority())
        return tokenize(*args)

    def recorded_begin_write():
        seen["write"].add(priority())
        return begin_write()

    monkeypatch.setattr(token_pass, "_all_params", recorded_tokenize)
    monkeypatch.setattr(token_pass, "begin_write", recorded_begin_write)
    process_priority = priority()
    post_many(client, project_key, 2)
    pass_ = token_pass.TokenPass(0.02, str(tmp_path / "pass.lock"), batch_rows=4)
    pass_.start(app)
    try:
        deadline = time.monotonic() + 60
        while pending(app) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending(app) == 0
    finally:
        pass_.stop()
    assert seen == {"tokenize": {LOWEST_PRIORITY}, "write": {process_priority}}


def test_the_refresher_replays_at_the_lowest_priority_and_stores_at_its_own(
    app, client, project_key, monkeypatch
):
    seen: dict[str, set[int]] = {"compute": set(), "store": set()}
    compute, store = attribution_store.compute, attribution_store.store

    def recorded_compute(*args):
        seen["compute"].add(priority())
        return compute(*args)

    def recorded_store(*args):
        seen["store"].add(priority())
        return store(*args)

    monkeypatch.setattr(attribution_store, "compute", recorded_compute)
    monkeypatch.setattr(attribution_store, "store", recorded_store)
    process_priority = priority()
    _reset(app)
    _apply(app, client, project_key, ("native", 0, 0, 4, True, False))  # a stale conversation
    refresher = attribution_refresh.AttributionRefresher(0.02)
    refresher.start(app)
    try:
        deadline = time.monotonic() + 60
        while not seen["store"] and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        refresher.stop()
    assert seen == {"compute": {LOWEST_PRIORITY}, "store": {process_priority}}


def test_without_a_lane_the_work_runs_in_the_callers_thread():
    assert background.direct(lambda: threading.get_ident()) == threading.get_ident()
