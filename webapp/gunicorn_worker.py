"""gunicorn's gthread worker, with two changes for agents: errors that gunicorn answers itself
are JSON, and the request line may be as long as `limit_request_line`, beyond gunicorn's cap.

gunicorn answers some requests before the app sees them: a request line over
`limit_request_line` (414), headers over `limit_request_field_size` (431), a request it cannot
parse (400). Its answer is an HTML page. An agent's HTTP client expects the API's JSON error
document, so this worker writes that instead.

gunicorn refuses `limit_request_line` values above 8190 bytes; only 0, unlimited, goes
further. But the unique_sdk sends up to 200 message ids in one GET query string, with each
comma escaped as `%2C`. 200 ids of 64 characters already take 13.4 KB, and ids of our
maximum length (255) take 51.6 KB. The worker raises gunicorn's cap to the configured limit.
The limit stays finite, because an unlimited request line is a way to exhaust memory.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import time
from http import HTTPStatus
from typing import Any

import gunicorn.http.message
from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.workers.gthread import ThreadWorker

from .errors import error_body

# gunicorn's errors, from the most specific, with the status we answer them with. A response
# header the app produced is the app's fault (500), although its class is a ParseException.
_STATUSES: tuple[tuple[type[BaseException], int], ...] = (
    (http_errors.InvalidResponseHeader, 500),
    (http_errors.InvalidResponseHeaderName, 500),
    (http_errors.ConfigurationProblem, 500),
    (http_errors.LimitRequestLine, 414),
    (http_errors.LimitRequestHeaders, 431),
    (http_errors.ExpectationFailed, 417),
    (http_errors.ForbiddenProxyRequest, 403),
    (http_errors.UnsupportedTransferCoding, 501),
    (http_errors.ParseException, 400),
    (ssl.SSLError, 400),
)

_MESSAGES = {
    414: "the request line (method, URL and query string) is too long: {exc}",
    431: "the request headers are too large: {exc}",
}


def raise_request_line_cap(limit: int) -> None:
    """Let gunicorn accept request lines of up to `limit` bytes (its own cap is 8190)."""
    if limit > gunicorn.http.message.MAX_REQUEST_LINE:
        gunicorn.http.message.MAX_REQUEST_LINE = limit


def error_status(exc: BaseException) -> int:
    """The status for an error gunicorn raised while reading a request."""
    for kind, status in _STATUSES:
        if isinstance(exc, kind):
            return status
    return 500


def json_error_response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response carrying the API's error document; the connection closes."""
    body = json.dumps(error_body(status, message)).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class JsonErrorWorker(ThreadWorker):
    """gthread, answering the requests gunicorn refuses with the API's JSON error document."""

    def init_process(self) -> None:
        raise_request_line_cap(self.cfg.limit_request_line)
        super().init_process()

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        status = error_status(exc)
        ip = (addr or ("",))[0]
        if status >= 500:
            self.log.exception("Error handling request from ip=%s", ip)
            message = "internal error; the server log has the details"
        else:
            self.log.warning("Invalid request from ip=%s: %s", ip, exc)
            message = _MESSAGES.get(status, "{exc}").format(exc=exc)
        try:
            util.write_nonblock(client, json_error_response(status, message))
        except Exception:
            self.log.debug("Failed to send error message.")

    def handle(self, conn: Any) -> Any:
        result = super().handle(conn)
        if result is False and not getattr(conn, "is_http2", False):
            # gunicorn closes this connection on its main loop, first lingering up to 2 s for
            # the client to finish sending: a slow client would stall every connection of
            # this worker meanwhile. Linger here, in this request's thread, instead.
            _linger(conn.sock)
        return result


def _linger(sock: Any, seconds: float = 2.0, max_bytes: int = 64 * 1024) -> None:
    """Half-close, read what the client still sends (bounded), then stop reading, so that
    gunicorn's own close finds nothing left to wait for."""
    deadline = time.monotonic() + seconds
    drained = 0
    with contextlib.suppress(OSError):  # the client may have gone already
        sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):  # a timeout ends the lingering too
            while drained < max_bytes and (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                data = sock.recv(4096)
                if not data:
                    break
                drained += len(data)
        sock.shutdown(socket.SHUT_RD)
