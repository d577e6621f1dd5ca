"""The run worker: works through the queue of runs (``model_run`` rows) with bounded
concurrency (docs/runs.md, 'The queue and where it runs').

No extra service: under gunicorn it runs in the token pass process that the master starts and
watches (``webapp.token_process``), in ``toolscope serve`` as threads of the server, and in the
foreground with ``toolscope runs work`` (operations, tests). Any number of workers, on one
machine or on several servers sharing one PostgreSQL, work through the same queue:

* a worker thread claims the oldest queued run in a write transaction
  (``model_runs.claim_next``: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, SQLite's write lock
  and a conditional update), which makes it ``running`` with a lease of RUN_LEASE_SECONDS and
  its owner's name: one worker only ever holds a run;
* while it waits for the provider (outside any transaction), a heartbeat thread extends the
  leases of the runs this worker holds, every third of the lease;
* the result is stored only if the worker still holds the lease (``model_runs.execute``);
* every worker, every few seconds, looks for runs left ``running`` whose lease ran out (their
  worker was killed, the machine went down): queued again while they have attempts left
  (RUN_MAX_ATTEMPTS), else failed with a message that says so (``model_runs.reap_expired``).
  A run is never left ``running``, and never executed by two workers at once (a lease runs out
  only when its holder stopped heartbeating, i.e. stopped).

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


@dataclass
class RunWorker:
    """``threads`` worker threads and one heartbeat thread: ``start(app)``, ``stop()``;
    ``run_until_idle(app)`` works in the caller's thread until the queue is empty (tests)."""

    threads: int = THREADS
    lease_seconds: float = LEASE_SECONDS
    max_attempts: int = MAX_ATTEMPTS
    poll_seconds: float = POLL_SECONDS
    reap_seconds: float = REAP_SECONDS
    name: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    )

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._leases: dict[str, str] = {}  # run id → owner, of the runs being executed
        self._lock = threading.Lock()
        self._next_reap = 0.0
        self.executed = 0  # runs this worker executed (sent, or failed before sending)

    @classmethod
    def for_app(cls, app: Any, **overrides: Any) -> RunWorker:
        """A worker with the app's settings (RUN_WORKERS, RUN_LEASE_SECONDS,
        RUN_MAX_ATTEMPTS)."""
        config = app.config
        values: dict[str, Any] = {
            "threads": int(config.get("RUN_WORKERS", THREADS)),
            "lease_seconds": float(config.get("RUN_LEASE_SECONDS") or LEASE_SECONDS),
            "max_attempts": int(config.get("RUN_MAX_ATTEMPTS") or MAX_ATTEMPTS),
        }
        values.update(overrides)
        return cls(**values)

    # --- Threads ---------------------------------------------------------------------------

    def start(self, app: Any) -> None:
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
                self._wake.wait(self.poll_seconds)
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
        """In an app context: reap expired leases when due, then claim and execute one run.
        True when a run was executed (the caller looks for the next one at once)."""
        now = time.monotonic()
        if now >= self._next_reap:
            self._next_reap = now + self.reap_seconds
            reaped = model_runs.reap_expired(self.max_attempts)
            if reaped:
                log.warning("%d run(s) whose worker stopped were queued again or failed", reaped)
            studies.advance_open()  # a study whose last run was reaped or cancelled by hand
        owner = f"{self.name}/{n}/{secrets.token_hex(3)}"
        run_id = model_runs.claim_next(owner, self.lease_seconds)
        db.session.commit()
        if run_id is None:
            return False
        with self._lock:
            self._leases[run_id] = owner
        try:
            outcome = model_runs.execute(run_id, owner)
        finally:
            with self._lock:
                self._leases.pop(run_id, None)
        self.executed += 1
        study_id = db.session.scalar(
            model_runs.select(model_runs.RUN.c.study_id).where(model_runs.RUN.c.id == run_id)
        )
        if study_id is not None:  # the spending cap, the study's end
            studies.advance(study_id)
        else:
            db.session.commit()
        if not outcome.stored:
            log.warning("run %s was taken from this worker before it finished", run_id)
        return True

    def run_until_idle(self, app: Any, limit: int = 10_000) -> int:
        """Execute queued runs in this thread until none is left (at most ``limit``); how many
        were executed. No heartbeat: for tests and short jobs."""
        done = 0
        with app.app_context():
            try:
                self._next_reap = 0.0
                while done < limit and self.step():
                    done += 1
            finally:
                db.session.remove()
        return done
