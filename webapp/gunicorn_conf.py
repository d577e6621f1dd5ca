"""gunicorn settings for production, used by the Procfile and by `toolscope bench`:

    gunicorn --config python:webapp.gunicorn_conf --workers 2 --bind 0.0.0.0:8000 \
        'webapp:create_app()'

Command-line flags override these values. Measured on 2 cores in docs/benchmark.md.

Processes: the master (no tokenizer), the web workers, and one token pass process that the
master starts when it is ready (`when_ready`) and stops on exit (docs/deployment.md).
"""

from __future__ import annotations

import gc
from typing import Any

# Threads: a dashboard page or an htmx poll is not queued behind a write that waits for the
# SQLite lock, and agents' keep-alive connections are kept open. The worker is gthread that
# answers gunicorn's own errors (414, 431, 400) with the API's JSON error document.
worker_class = "webapp.gunicorn_worker.JsonErrorWorker"
threads = 4

# `GET /messages/tools` takes 200 message ids in its query string, as the unique_sdk sends
# them: up to 51.6 KB for ids of the longest allowed length (255). gunicorn's default is 4094.
limit_request_line = 64 * 1024

# Import the app once in the master and fork: workers start faster and share the code pages.
# Safe because create_app() opens no database connection (each worker opens its own).
preload_app = True

# Requests that were not answered in time are abandoned rather than holding a worker forever.
timeout = 60
# A worker that once parsed a maximum-size body returns its memory when it is replaced.
max_requests = 2000
max_requests_jitter = 200


def when_ready(server: Any) -> None:
    """Start the token pass in a process of its own (`webapp.token_process`), the only one of
    the server that loads the tokenizer (~80 MB): neither this master nor the web workers
    need it to ingest, so their memory stays small. It is started again if it dies. The same
    process sends the runs (`webapp.services.run_worker`), so it starts when either is on.

    Called before the web workers are forked: they inherit the doorbell's write end
    (`webapp.doorbell`), so a POST that queues a run wakes that run worker at once."""
    app = server.app.wsgi()  # loaded already (preload_app)
    interval = app.config.get("TOKEN_PASS_SECONDS") or 0
    if interval > 0 or (app.config.get("RUN_WORKERS") or 0) > 0:
        from webapp import doorbell
        from webapp.token_process import TokenProcess

        bell = None
        if (app.config.get("RUN_WORKERS") or 0) > 0:
            server.doorbell = doorbell.make()  # kept open: a restarted process gets it again
            bell = server.doorbell.fileno()
        server.token_process = TokenProcess(app.config["DATABASE_URL"], interval, doorbell_fd=bell)
        server.token_process.start()


def on_exit(server: Any) -> None:
    token_process = getattr(server, "token_process", None)
    if token_process is not None:
        token_process.stop()
    if getattr(server, "doorbell", None) is not None:
        from webapp import doorbell

        doorbell.close(server.doorbell)


def pre_fork(_server: Any, _worker: Any) -> None:
    """Move the master's objects (the preloaded app) out of the garbage collector's reach, so
    that a worker's collections do not write into their pages and copy them: those pages stay
    shared between the workers instead of becoming each worker's private copy (see
    gc.freeze; measured in docs/benchmark.md, "Memory after a million calls")."""
    gc.collect()
    gc.freeze()
