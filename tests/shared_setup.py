"""Setup that several pytest processes may reach at once (``make test`` runs the suite in
pytest-xdist workers, each with its own session): build something outside ``tmp_path`` only
while holding ``one_at_a_time(target)``, so a second worker waits for the first and then finds
the result (its stamp) instead of building over it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def worker_id() -> str:
    """``gw0``, ``gw1``... under pytest-xdist; ``main`` in a run without workers."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


@contextmanager
def one_at_a_time(target: Path) -> Iterator[None]:
    """Hold an exclusive lock named after ``target`` for the block.

    The lock file lives in the temporary directory, not in ``target``: a build may delete and
    recreate ``target`` (``npm ci`` does), and a lock on a deleted file locks nothing. The kernel
    releases a flock when its holder exits, so a worker that dies mid-build leaves no stale lock.
    """
    digest = hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:16]
    lock = Path(tempfile.gettempdir()) / f"toolscope-test-{digest}.lock"
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
