"""A request body must arrive within BODY_TIMEOUT_SECONDS, however slowly the client sends it.

A gthread worker gives each request a thread, and that thread waits while the body arrives. A
client that announces 1,000 bytes and sends 14 keeps the thread for as long as it likes. A
socket timeout does not bound this: it limits each wait, and a client can send one byte just
inside it, again and again. So one watchdog thread per process keeps the deadline of each
body being read. When a deadline passes, the watchdog shuts the read side of that socket. The
blocked read returns at once, and the reader raises a 408 (werkzeug's RequestTimeout) instead
of passing on a body cut short. The write side stays open for that answer.

This bounds how long a thread can be held. It does not stop many slow clients from holding
many threads for that long. A reverse proxy that buffers request bodies does that (see the
README's deployment section).

A request answered 413 has a body the app did not read. Closing the connection on it unread
makes the kernel reset it, and a client that writes its whole body before it reads (many
HTTP clients and OTLP exporters do) sees a broken pipe, which exporters retry, instead of the
413, which they do not. So the middleware reads and drops the rest of such a body before the
answer goes out, up to DISCARD_MAX_BYTES and within the body deadline; past either, the
connection is closed unread.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.exceptions import RequestTimeout

_TIMED_OUT = "toolscope.body_timed_out"
# The most of a refused body read and dropped so that the client gets its 413: twice the OTLP
# limit (32 MiB), 8 times the API's (8 MiB). A body announced larger is not read at all.
DISCARD_MAX_BYTES = 64 * 1024 * 1024
# The client socket, as gunicorn and werkzeug's development server put it in the environ.
_SOCKET_KEYS = ("gunicorn.socket", "werkzeug.socket")


class _Watchdog:
    """Shuts the read side of sockets whose body deadline has passed."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._watched: dict[int, tuple[float, socket.socket, dict[str, Any]]] = {}
        self._tokens = itertools.count()
        self._pid: int | None = None
        # When the watchdog will look next (None: not until notified). A deadline after that
        # needs no wake-up: waking it for every body was a thread switch per request.
        self._wake_at: float | None = None

    def watch(self, deadline: float, sock: socket.socket, environ: dict[str, Any]) -> int:
        with self._cond:
            if self._pid != os.getpid():  # first body in this process (gunicorn forks workers)
                self._pid = os.getpid()
                self._wake_at = None
                threading.Thread(target=self._run, name="body-deadline", daemon=True).start()
            token = next(self._tokens)
            self._watched[token] = (deadline, sock, environ)
            if self._wake_at is None or deadline < self._wake_at:
                self._cond.notify()
            return token

    def release(self, token: int) -> None:
        with self._cond:
            self._watched.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token, (deadline, sock, environ) in list(self._watched.items()):
                    if deadline <= now:
                        del self._watched[token]
                        environ[_TIMED_OUT] = True
                        _shut_read_side(sock)
                # The deadline waited for may be a released body's: that wake-up finds nothing
                # to do and looks again (about once per deadline's length under steady load).
                self._wake_at = min((d for d, _, _ in self._watched.values()), default=None)
                self._cond.wait(None if self._wake_at is None else self._wake_at - now)


def _shut_read_side(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # the client may have gone already
        sock.shutdown(socket.SHUT_RD)


_WATCHDOG = _Watchdog()


class _WatchedInput:
    """`wsgi.input` that ends the watch once the whole body has been read."""

    def __init__(
        self,
        stream: Any,
        environ: dict[str, Any],
        length: int | None,
        done: Callable[[], None],
        seconds: float,
    ):
        self._stream = stream
        self._environ = environ
        self._left = length
        self._done = done
        self._seconds = seconds

    def _account(self, data: bytes) -> bytes:
        if self._environ.get(_TIMED_OUT):
            # What arrived is cut short: never let it pass for the whole body.
            raise RequestTimeout(
                f"the request body did not arrive within {self._seconds:g} seconds"
            )
        if self._left is not None:
            self._left -= len(data)
        if not data or self._left == 0:
            self._done()
        return data

    def read(self, size: int | None = -1) -> bytes:
        return self._account(self._stream.read(size))

    def readline(self, size: int | None = -1) -> bytes:
        return self._account(self._stream.readline(size))

    def __iter__(self) -> Iterable[bytes]:
        return iter(self.readline, b"")

    def discard(self, max_bytes: int) -> bool:
        """Read and drop the rest of the body (never past its announced length), unless more
        than `max_bytes` of it are left: whether it was read to its end."""
        if self._left is not None and self._left > max_bytes:
            return False
        step, dropped = 64 * 1024, 0
        while self._left is None or self._left > 0:
            data = self.read(step if self._left is None else min(step, self._left))
            if not data:
                return True
            dropped += len(data)
            if dropped > max_bytes:  # a chunked body, which announces no length
                return False
        return True


def _content_length(environ: dict[str, Any]) -> int | None:
    try:
        return max(int(environ.get("CONTENT_LENGTH") or ""), 0)
    except ValueError:
        return None


def _sends_body(environ: dict[str, Any]) -> bool:
    chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    return chunked or bool(_content_length(environ))


class BodyDeadline:
    """WSGI middleware: a request body must arrive within `seconds` from the request's start."""

    def __init__(self, app: Callable[..., Any], seconds: float):
        self.app = app
        self.seconds = seconds

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        sock = next((environ[k] for k in _SOCKET_KEYS if k in environ), None)
        if sock is None or not _sends_body(environ):
            return self.app(environ, start_response)
        token = _WATCHDOG.watch(time.monotonic() + self.seconds, sock, environ)
        release = lambda: _WATCHDOG.release(token)  # noqa: E731
        environ["wsgi.input"] = _WatchedInput(
            environ["wsgi.input"], environ, _content_length(environ), release, self.seconds
        )
        statuses: list[str] = []

        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            statuses.append(status)
            return start_response(status, headers, exc_info)

        try:
            answer = self.app(environ, start)
            if statuses and statuses[-1].startswith("413"):
                # Refused unread (the OTLP receiver, werkzeug's own limit): read the rest, so
                # that the client gets this answer, before it is sent.
                discard_body(environ)
            return answer
        finally:
            release()


def discard_body(environ: dict[str, Any]) -> None:
    """Read and drop what is left of the request body, so that a client that reads nothing
    before it has sent everything gets the answer instead of a reset connection. Bounded by
    the body deadline and DISCARD_MAX_BYTES: the rest of a larger body is left unread and the
    read side of the socket shut (as at the deadline), so that gunicorn closes the connection
    after the answer instead of waiting for more. (Without a socket, under a test client,
    there is nothing to drop.)"""
    stream = environ.get("wsgi.input")
    if not isinstance(stream, _WatchedInput):
        return
    with contextlib.suppress(OSError, RequestTimeout):  # gone, or cut off at the deadline
        if not stream.discard(DISCARD_MAX_BYTES):
            sock = next((environ[k] for k in _SOCKET_KEYS if k in environ), None)
            if sock is not None:
                _shut_read_side(sock)
