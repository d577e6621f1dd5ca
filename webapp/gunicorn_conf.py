"""gunicorn settings for production, used by the Procfile and by `toolscope bench`:

    gunicorn --config python:webapp.gunicorn_conf --workers 2 --bind 0.0.0.0:8000 \
        'webapp:create_app()'

Command-line flags override these values. Measured on 2 cores in docs/benchmark.md.
"""

from __future__ import annotations

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


def on_starting(_server: Any) -> None:
    """Load the tokenizer (~80 MB) in the master, so the forked workers share it instead of
    each loading a copy on its first write."""
    from webapp.tokens import preload

    preload()


def post_worker_init(worker: Any) -> None:
    """Start the token pass in the worker (after the fork: a thread does not survive one).
    The workers of one server share a file lock, so one of them does the counting."""
    app = worker.wsgi
    interval = app.config.get("TOKEN_PASS_SECONDS") or 0
    if interval > 0:
        from webapp.ingest.token_pass import TokenPass

        worker.token_pass = TokenPass.for_database(app.config["DATABASE_URL"], interval)
        worker.token_pass.start(app)


def worker_exit(_server: Any, worker: Any) -> None:
    token_pass = getattr(worker, "token_pass", None)
    if token_pass is not None:
        token_pass.stop()
