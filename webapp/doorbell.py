"""The doorbell: a web worker of gunicorn tells the run worker, in the token pass process, that
runs were queued (docs/runs.md, 'The queue and where it runs').

A POST that queues a run wakes the run worker's threads of its own process at once
(``model_runs.notify``), which is all `toolscope serve` needs. Under gunicorn the run worker
lives in another process (``webapp.token_process``), which without a bell would see the run
only at its next poll. So gunicorn's master, before it forks the web workers, makes a pair of
connected Unix datagram sockets (`make`): the web workers inherit the write end and ring it
(`ring`, one byte, never blocking); the token pass process gets the read end (`listen`) and
turns each ring into the in-process wake-up.

The bell is a hint: a ring lost (a full buffer, a token pass process being restarted) costs
only the wait for the poll, which stays the fallback; so does a run queued by another server
on the same PostgreSQL (its LISTEN/NOTIFY could ring across machines one day).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable

# The write end in this process: set in gunicorn's master before the fork, so every web worker
# has it; None elsewhere (`toolscope serve`, the CLI, the token pass process).
_bell: socket.socket | None = None


def make() -> socket.socket:
    """In gunicorn's master: the pair; this process (and the workers it forks) ring the write
    end. The read end is returned, for the token pass process (pass its ``fileno()``)."""
    global _bell
    read_end, write_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    write_end.setblocking(False)  # a request never waits on the bell
    read_end.set_inheritable(True)
    _bell = write_end
    return read_end


def close(read_end: socket.socket | None) -> None:
    """In gunicorn's master, at its exit: both ends closed, no bell rung any more."""
    global _bell
    for end in (_bell, read_end):
        if end is not None:
            end.close()
    _bell = None


def ring() -> None:
    """Tell the run worker of the token pass process that runs were queued (no-op without a
    bell). A full buffer means it has rings pending already."""
    if _bell is not None:
        with contextlib.suppress(OSError):  # BlockingIOError (full), or a bell gone
            _bell.send(b"\0")


def listen(fd: int, wake: Callable[[], None], stopping: threading.Event) -> threading.Thread:
    """In the token pass process: a thread that calls ``wake()`` once for each burst of rings
    on the read end ``fd`` (all pending rings drained at once), until ``stopping`` is set."""
    bell = socket.socket(fileno=fd)
    bell.setblocking(False)

    def loop() -> None:
        with bell:
            while not stopping.is_set():
                # A timeout only so that `stopping` is seen; the run worker polls on its own.
                readable, _, _ = select.select([bell], [], [], 1.0)
                if not readable:
                    continue
                with contextlib.suppress(BlockingIOError):  # drained
                    while bell.recv(64):
                        pass
                wake()

    thread = threading.Thread(target=loop, name="toolscope-doorbell", daemon=True)
    thread.start()
    return thread
