"""The session secret kept in the instance folder: made once, the same for every process that
starts at the same moment (gunicorn workers without preload, parallel test workers)."""

from __future__ import annotations

import stat
import threading
from concurrent.futures import ThreadPoolExecutor

from webapp import _secret_key


def test_processes_starting_together_all_get_the_one_key(tmp_path):
    start = threading.Barrier(16)

    def read() -> str:
        start.wait()
        return _secret_key(str(tmp_path))

    with ThreadPoolExecutor(16) as pool:
        keys = set(pool.map(lambda _: read(), range(16)))
    assert len(keys) == 1
    (key,) = keys
    assert len(key) == 64
    path = tmp_path / "secret_key"
    assert path.read_text() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["secret_key"]  # no draft left behind
    assert _secret_key(str(tmp_path)) == key  # kept across restarts
