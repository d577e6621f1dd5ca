"""The lowest CPU priority for background work, without priority inversion.

The token pass and the tool-cost refresher run beside the web workers and must not take CPU
from requests, so their heavy part (tokenizing, replaying conversations) runs at nice 19. But
their writes take SQLite's one write lock, and a thread at nice 19 on a busy machine gets a
sliver of a core: holding the lock, it made every writer of the server wait past its busy
timeout ("database is locked"). So the thread that writes stays at the priority of the
process and hands only the CPU-heavy, lock-free part to a `LowPriorityLane`: one daemon thread
at nice 19 that runs what it is given, in order, while the caller waits holding no lock.

Linux schedules threads as tasks, so a thread's priority is its own (and inherited by the
threads it starts); raising it back would need CAP_SYS_NICE, which is why the lane is a thread
of its own rather than a priority switched around the write.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

LOWEST_PRIORITY = 19

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]


def lower_this_thread() -> None:
    """The lowest CPU priority for the calling thread only (where the OS allows it)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)


def direct(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` here and now: a lane's `run` for callers without one (the CLI, tests)."""
    return fn(*args)


class LowPriorityLane:
    """One daemon thread at the lowest priority; ``run(fn, *args)`` runs ``fn`` there and
    returns its result (or raises its exception) to the caller, which waits."""

    def __init__(self, name: str):
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()  # None: end (`close`)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        future: Future[T] = Future()
        self._start()
        self._jobs.put((future, fn, args))
        return future.result()

    def close(self) -> None:
        """End the thread once it has run what it was given (a later `run` starts another)."""
        with self._lock:
            if self._thread is not None:
                self._jobs.put(None)
                self._thread = None

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                # A daemon, not a concurrent.futures pool: an interpreter exiting (SIGTERM to
                # the token pass process) does not wait for a starved tokenization to finish.
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        lower_this_thread()
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # the caller's to handle, in the caller's thread
                future.set_exception(exc)
