"""The body-deadline watchdog: every deadline is kept, and a body whose deadline comes after
the watchdog's next look does not wake it (a thread switch per request under load)."""

from __future__ import annotations

import socket
import time
from typing import Any

from webapp.body_deadline import _TIMED_OUT, _Watchdog


def _shut_within(sock: socket.socket, seconds: float) -> bool:
    """True when the read side of `sock` was shut (a read returns b"" at once) in time."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False


def test_a_sooner_deadline_still_fires_on_time() -> None:
    watchdog = _Watchdog()
    late, late_peer = socket.socketpair()
    soon, soon_peer = socket.socketpair()
    late_env: dict[str, Any] = {}
    soon_env: dict[str, Any] = {}
    try:
        now = time.monotonic()
        watchdog.watch(now + 60, late, late_env)
        time.sleep(0.05)  # the watchdog now waits for the late deadline
        watchdog.watch(now + 0.2, soon, soon_env)
        assert _shut_within(soon, 3.0)
        assert soon_env.get(_TIMED_OUT) is True
        assert _TIMED_OUT not in late_env
    finally:
        for sock in (late, late_peer, soon, soon_peer):
            sock.close()


def test_later_deadlines_do_not_wake_the_watchdog() -> None:
    watchdog = _Watchdog()
    socks = [socket.socketpair() for _ in range(3)]
    notified = []
    try:
        now = time.monotonic()
        token = watchdog.watch(now + 60, socks[0][0], {})
        time.sleep(0.05)  # the watchdog now waits for that deadline
        original = watchdog._cond.notify
        watchdog._cond.notify = lambda n=1: (notified.append(n), original(n))  # type: ignore[method-assign]
        watchdog.release(token)
        watchdog.watch(now + 61, socks[1][0], {})
        watchdog.watch(now + 62, socks[2][0], {})
        assert notified == []
        # A deadline before the watchdog's next look wakes it.
        watchdog.watch(now + 1, socks[2][1], {})
        assert notified == [1]
    finally:
        for pair in socks:
            for sock in pair:
                sock.close()
