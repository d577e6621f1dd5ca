"""The token pass in a process of its own, started and watched by gunicorn's master.

The tokenizer (o200k_base) is ~80 MB once loaded. Since writes leave every count to the token
pass (`webapp.ingest.token_pass`), the pass is the only code that needs it while agents write;
running it here, rather than in a thread of a web worker, keeps the tokenizer out of the master
and of every web worker. A web worker still loads it, lazily, in the rare request that counts a
text itself (a replay or a chart over rows the pass has not counted yet).

`TokenProcess` (in the master, `webapp.gunicorn_conf`):

* `start()` runs ``python -m webapp.token_process`` with the server's database and interval,
  in the server's process group (stopping the group stops it too);
* a watcher thread starts it again, after `RESTART_SECONDS` (longer if it keeps dying at
  start), whenever it exits while the server runs (killed, out of memory, a crash): its
  pending work is the NULL counts in the database, so nothing is lost;
* `stop()` (gunicorn's `on_exit`) sends SIGTERM and waits, then SIGKILL.

The process itself (`main`) runs `TokenPass`, and the run worker beside it
(`webapp.services.run_worker`, RUN_WORKERS threads: the runs sent to models) and the refresher
of the stored tool costs (`webapp.services.attribution_refresh`), until SIGTERM or
SIGINT, and exits by itself if its
parent goes away (a master killed with SIGKILL runs no hook). It keeps the file lock of
`TokenPass`, so with several servers on one machine one of them counts at a time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

ENV_DATABASE_URL = "TOOLSCOPE_TOKEN_PROCESS_DATABASE_URL"
ENV_INTERVAL = "TOOLSCOPE_TOKEN_PROCESS_SECONDS"
ENV_PARENT = "TOOLSCOPE_TOKEN_PROCESS_PARENT"
# The read end of the doorbell (webapp/doorbell.py), a file descriptor the process inherits.
ENV_DOORBELL = "TOOLSCOPE_TOKEN_PROCESS_DOORBELL_FD"
# The command line that names the process (the bench and the tests find it by it).
MODULE = "webapp.token_process"
RESTART_SECONDS = 1.0
# A process that dies this soon after its start (a bad setting, a database that is down) is
# started again after twice the previous wait, up to MAX_RESTART_SECONDS, not every second.
EARLY_DEATH_SECONDS = 30.0
MAX_RESTART_SECONDS = 60.0
PARENT_CHECK_SECONDS = 1.0


class TokenProcess:
    """The token pass process of one server, restarted until `stop()`."""

    def __init__(
        self,
        database_url: str,
        interval: float,
        restart_seconds: float = RESTART_SECONDS,
        doorbell_fd: int | None = None,
    ):
        self.database_url = database_url
        self.interval = interval
        self.doorbell_fd = doorbell_fd
        self.restart_seconds = restart_seconds
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # start-again and stop never interleave
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self._spawn()
        self._watcher = threading.Thread(
            target=self._watch, name="toolscope-token-process-watcher", daemon=True
        )
        self._watcher.start()

    def _spawn(self) -> None:
        env = {
            **os.environ,
            ENV_DATABASE_URL: self.database_url,
            ENV_INTERVAL: repr(self.interval),
            ENV_PARENT: str(os.getpid()),
        }
        bell = () if self.doorbell_fd is None else (self.doorbell_fd,)
        if bell:
            env[ENV_DOORBELL] = str(self.doorbell_fd)
        # close_fds (the default): the child holds none of the master's listening sockets,
        # only the doorbell's read end (the same one again after a restart).
        self.process = subprocess.Popen(
            [sys.executable, "-m", MODULE], env=env, stdin=subprocess.DEVNULL, pass_fds=bell
        )

    def _watch(self) -> None:
        delay = self.restart_seconds
        while not self._stopping.is_set():
            process = self.process
            assert process is not None
            started = time.monotonic()
            # gunicorn's SIGCHLD handler may reap the child first; wait() then says 0.
            code = process.wait()
            if time.monotonic() - started < EARLY_DEATH_SECONDS:
                delay = min(delay * 2, MAX_RESTART_SECONDS)
            else:
                delay = self.restart_seconds
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                log.warning("the token pass process exited (%s); starting it again", code)
                self.restarts += 1
                self._spawn()

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping.set()
            process = self.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> int:
    """The token pass process: count until SIGTERM / SIGINT or until the parent is gone."""
    logging.basicConfig(level=logging.WARNING, format="[token pass %(process)d] %(message)s")
    database_url = os.environ[ENV_DATABASE_URL]
    interval = float(os.environ[ENV_INTERVAL])
    parent = int(os.environ.get(ENV_PARENT) or 0)
    stopping: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from . import create_app
    from .ingest.token_pass import TokenPass

    # No API, no pages: the pass needs only the database (~11 MB less).
    config = {"DATABASE_URL": database_url, "TOKEN_PASS_SECONDS": interval}
    app = create_app(config, routes=False)
    # TOKEN_PASS_SECONDS=0 turns the pass off; the process may still run for the run worker.
    token_pass = TokenPass.for_app(app) if interval > 0 else None  # the environment's settings
    if token_pass is not None:
        token_pass.start(app)
    # The stored tool-cost attribution recomputed beside the pass (ATTRIBUTION_REFRESH_SECONDS).
    from .services.attribution_refresh import AttributionRefresher

    refresher = AttributionRefresher.for_app(app)
    if refresher is not None:
        refresher.start(app)
    # The run worker beside the pass: the server's runs are sent from here, so no web worker
    # waits on a model (docs/runs.md, 'The queue and where it runs').
    run_worker = None
    if app.config.get("RUN_WORKERS", 0) > 0:
        from .services.run_worker import RunWorker

        run_worker = RunWorker.for_app(app)
        run_worker.start(app)
    ringing = threading.Event()  # set to stop the doorbell's thread
    if run_worker is not None and os.environ.get(ENV_DOORBELL):
        from . import doorbell
        from .services import model_runs

        # A web worker's POST rings: the run worker's threads wake as a POST here would.
        doorbell.listen(int(os.environ[ENV_DOORBELL]), model_runs.notify, ringing)
    while not stopping and (not parent or os.getppid() == parent):
        time.sleep(PARENT_CHECK_SECONDS)  # so a signal stops it within this time
    ringing.set()
    if run_worker is not None:
        run_worker.stop()
    if refresher is not None:
        refresher.stop()
    if token_pass is not None:
        token_pass.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
