"""The run worker: works through the queue of runs (``model_run`` rows) with bounded
concurrency (docs/runs.md, 'The queue and where it runs').

No extra service: under gunicorn it runs in the token pass process that the master starts and
watches (``webapp.token_process``), in ``toolscope serve`` as threads of the server, and in the
foreground with ``toolscope runs work`` (operations, tests). Any number of workers, on one
machine or on several servers sharing one PostgreSQL, work through the same queue:

* a worker thread claims the oldest queued runs in a write transaction, as many as this
  worker has threads free (``model_runs.claim_batch``: ``FOR UPDATE SKIP LOCKED`` on
  PostgreSQL, SQLite's write lock and a conditional update), which makes them ``running`` with
  a lease of RUN_LEASE_SECONDS and their owner's name: one worker only ever holds a run. It
  executes the first and hands the others to its idle threads (a worker that stops gives the
  ones not started back, ``model_runs.release``): one write for several claims;
* while it waits for the provider (outside any transaction), a heartbeat thread extends the
  leases of the runs this worker holds, every third of the lease;
* the result is stored only if the worker still holds the lease (``model_runs.execute``);
* every worker, every few seconds, looks for runs left ``running`` whose lease ran out (their
  worker was killed, the machine went down): queued again while they have attempts left
  (RUN_MAX_ATTEMPTS), else failed with a message that says so (``model_runs.reap_expired``).
  A run is never left ``running``, and never executed by two workers at once (a lease runs out
  only when its holder stopped heartbeating, i.e. stopped).

A study is stored ``preparing`` by its POST; one thread of each worker at a time prepares
its runs, PREPARE_BATCH conversations a step (``studies.prepare_next``), while the others
send the runs already queued.

A failure of the database (busy, gone) is logged and tried again at the next poll; a run's own
failure (the provider's error) is stored on the run.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..db import db
from . import model_runs, studies

log = logging.getLogger(__name__)

# Defaults of the settings (webapp.settings).
THREADS = 4
LEASE_SECONDS = 60.0
MAX_ATTEMPTS = 2
# How often an idle worker thread looks at the queue, and how often expired leases are looked for.
POLL_SECONDS = 0.5
REAP_SECONDS = 5.0
# Conversations of a study prepared in one step (their runs stored in one write).
PREPARE_BATCH = studies.PREPARE_BATCH


@dataclass
class RunWorker:
    """``threads`` worker threads and one heartbeat thread: ``start(app)``, ``stop()``;
    ``run_until_idle(app)`` works in the caller's thread until the queue is empty (tests)."""

    threads: int = THREADS
    lease_seconds: float = LEASE_SECONDS
    max_attempts: int = MAX_ATTEMPTS
    poll_seconds: float = POLL_SECONDS
    reap_seconds: float = REAP_SECONDS
    prepare_batch: int = PREPARE_BATCH
    name: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    )

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._app: Any = None
        self._leases: dict[str, str] = {}  # run id → owner, of the runs claimed and not finished
        self._claimed: deque[tuple[str, str, str | None]] = deque()  # claimed, not started
        self._busy = 0  # threads executing a run
        self._lock = threading.Lock()
        self._preparing = threading.Lock()  # one thread of this worker prepares studies
        self._next_reap = 0.0
        self._next_prepare = 0.0
        self.executed = 0  # runs this worker executed (sent, or failed before sending)
        self.prepared = 0  # preparation steps (batches of a study's conversations) done

    @classmethod
    def for_app(cls, app: Any, **overrides: Any) -> RunWorker:
        """A worker with the app's settings (RUN_WORKERS, RUN_LEASE_SECONDS,
        RUN_MAX_ATTEMPTS, RUN_POLL_SECONDS)."""
        config = app.config
        values: dict[str, Any] = {
            "threads": int(config.get("RUN_WORKERS", THREADS)),
            "lease_seconds": float(config.get("RUN_LEASE_SECONDS") or LEASE_SECONDS),
            "max_attempts": int(config.get("RUN_MAX_ATTEMPTS") or MAX_ATTEMPTS),
            "poll_seconds": float(config.get("RUN_POLL_SECONDS") or POLL_SECONDS),
        }
        values.update(overrides)
        return cls(**values)

    # --- Threads ---------------------------------------------------------------------------

    def start(self, app: Any) -> None:
        self._app = app
        model_runs._waiters.append(self._wake)
        for n in range(self.threads):
            thread = threading.Thread(
                target=self._work, args=(app, n), name=f"toolscope-runs-{n}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        beat = threading.Thread(
            target=self._heartbeat, args=(app,), name="toolscope-runs-heartbeat", daemon=True
        )
        beat.start()
        self._threads.append(beat)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking runs; wait up to ``timeout`` for the runs being executed (a run cut off
        by the process's exit is taken up again once its lease runs out)."""
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._wake in model_runs._waiters:
            model_runs._waiters.remove(self._wake)
        if self._app is not None:
            self._give_back(self._app)

    def _give_back(self, app: Any) -> None:
        """Runs claimed and not started go back to the queue (else they wait for their lease
        to run out, an attempt spent)."""
        with self._lock:
            left = {run_id: owner for run_id, owner, _ in self._claimed}
            self._claimed.clear()
            for run_id in left:
                self._leases.pop(run_id, None)
        if not left:
            return
        try:
            with app.app_context():
                try:
                    model_runs.release(left)
                finally:
                    db.session.remove()
        except Exception:
            log.warning(
                "run worker could not give back %d claimed run(s)", len(left), exc_info=True
            )

    def _work(self, app: Any, n: int) -> None:
        while not self._stop.is_set():
            try:
                with app.app_context():
                    try:
                        worked = self.step(n)
                    finally:
                        db.session.remove()
            except Exception:  # the database busy or gone: try again at the next poll
                log.warning("run worker step failed; retrying", exc_info=True)
                worked = False
            if not worked:
                if self._wake.wait(self.poll_seconds):
                    self._next_prepare = 0.0  # woken: a study may have been posted
                self._wake.clear()

    def _heartbeat(self, app: Any) -> None:
        interval = max(self.lease_seconds / 3, 0.05)
        while not self._stop.wait(interval):
            with self._lock:
                leases = dict(self._leases)
            if not leases:
                continue
            try:
                with app.app_context():
                    try:
                        model_runs.heartbeat(leases, self.lease_seconds)
                    finally:
                        db.session.remove()
            except Exception:
                log.warning("run worker heartbeat failed; retrying", exc_info=True)

    # --- One step ----------------------------------------------------------------------------

    def step(self, n: int = 0) -> bool:
        """In an app context: reap expired leases when due, prepare a batch of a study's runs
        when one is preparing (one thread at a time), then execute one claimed run. True when
        something was done (the caller looks for more at once)."""
        now = time.monotonic()
        if now >= self._next_reap:
            self._next_reap = now + self.reap_seconds
            reaped = model_runs.reap_expired(self.max_attempts)
            if reaped:
                log.warning("%d run(s) whose worker stopped were queued again or failed", reaped)
            studies.advance_open()  # a study whose last run was reaped or cancelled by hand
        prepared = self._prepare()
        claimed = self._take(n)
        if claimed is None:
            return prepared
        run_id, owner, study_id = claimed
        try:
            outcome = model_runs.execute(run_id, owner)
        finally:
            with self._lock:
                self._leases.pop(run_id, None)
                self._busy -= 1
        self.executed += 1
        if study_id is not None:  # the spending cap, the study's end
            studies.advance(study_id)
        else:
            db.session.commit()
        if not outcome.stored:
            log.warning("run %s was taken from this worker before it finished", run_id)
        return True

    def _prepare(self) -> bool:
        """Prepare the next batch of a ``preparing`` study, when this thread is the one that
        prepares and one is due (at once after a wake-up, else every poll)."""
        if time.monotonic() < self._next_prepare or not self._preparing.acquire(blocking=False):
            return False
        try:
            if studies.prepare_next(self.prepare_batch) is None:
                self._next_prepare = time.monotonic() + self.poll_seconds
                return False
            self.prepared += 1
            return True
        finally:
            self._preparing.release()

    def _take(self, n: int) -> tuple[str, str, str | None] | None:
        """A claimed run to execute: one handed over by another thread's claim, else a new
        claim of as many runs as this worker has threads free (the others handed over)."""
        with self._lock:
            if self._claimed:
                self._busy += 1
                return self._claimed.popleft()
            free = max(1, self.threads - self._busy)
            self._busy += 1
        owner = f"{self.name}/{n}/{secrets.token_hex(3)}"
        try:
            claimed = model_runs.claim_batch(owner, free, self.lease_seconds)
            db.session.commit()
        except BaseException:
            with self._lock:
                self._busy -= 1
            raise
        with self._lock:
            for run_id, _ in claimed:
                self._leases[run_id] = owner
            if not claimed:
                self._busy -= 1
                return None
            self._claimed.extend((run_id, owner, study) for run_id, study in claimed[1:])
        if len(claimed) > 1:
            self._wake.set()  # idle threads take the others
        run_id, study_id = claimed[0]
        return run_id, owner, study_id

    def run_until_idle(self, app: Any, limit: int = 10_000) -> int:
        """Execute queued runs in this thread (preparing studies' runs first) until none is
        left (at most ``limit``); how many were executed. No heartbeat: for tests and short
        jobs."""
        begun = self.executed
        with app.app_context():
            try:
                self._next_reap = 0.0
                while self.executed - begun < limit:
                    self._next_prepare = 0.0
                    if not self.step():
                        break
            finally:
                db.session.remove()
                self._give_back(app)
        return self.executed - begun
