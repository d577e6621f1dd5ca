"""A gunicorn server as the Procfile runs it (`webapp.gunicorn_conf`: its master, web workers and
token pass process), for the tests that need the real processes: started on a free loopback
port in its own process group, and killed with all its children at the end (gunicorn's own
shutdown takes seconds, and nothing is left to finish once a test has read its answers)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from typing import IO

from webapp.bench.server import _wait_until_answering, free_port, gunicorn_command


@contextlib.contextmanager
def procfile_server(
    settings: Mapping[str, str], workers: int = 2
) -> Iterator[tuple[subprocess.Popen, str, IO[str]]]:
    """The server with ``settings`` (``TOOLSCOPE_...`` variables) added to this environment,
    once it answers: its master process, its base URL and its log (stdout and stderr)."""
    port = free_port()
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            gunicorn_command(port, workers, None, None),
            env={**os.environ, **settings},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed with its children at the end
        )
        try:
            _wait_until_answering(process, port, log)
            yield process, f"http://127.0.0.1:{port}", log
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
