"""A stand-in for the Toolscope API on a loopback port, from the standard library only.

It records every request and answers like Toolscope does in shape (201 lists for writes, the
message for a round, `/meta` with limits), unless a test queued other answers: an outage, a
5xx, a 429 or a 4xx. The real server is exercised by Toolscope's own suite (tests/test_client.py).
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

PREFIX = "/api/v1"
DEFAULT_META: dict[str, Any] = {
    "object": "meta",
    "api_version": 1,
    "server_version": "0.1.0",
    "limits": {
        "max_tools_per_request": 50,
        "max_ids_per_request": 200,
        "max_messages_per_request": 500,
        "max_body_bytes": 8 * 1024 * 1024,
        "max_result_bytes": 2 * 1024 * 1024,
    },
}


def free_port() -> int:
    """A loopback port nothing listens on (for a Toolscope that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Seen:
    """One request as the server received it; `path` is below /api/v1, URL-decoded."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


class FakeToolscope:
    """`with FakeToolscope() as server:` serves on `server.url` until the block ends."""

    def __init__(self, port: int = 0, meta: dict[str, Any] | None = DEFAULT_META):
        self.meta = meta  # None: a server older than /meta (404)
        self.seen: list[Seen] = []
        self._queued: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,))

    def __enter__(self) -> FakeToolscope:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def queue(self, status: int, body: Any = None, times: int = 1, **headers: str) -> None:
        """Answer the next `times` API requests (other than /meta) with this instead."""
        with self._lock:
            self._queued.extend(Answer(status, body, headers) for _ in range(times))

    def api_calls(self, method: str | None = None) -> list[Seen]:
        """The requests other than /meta, optionally of one method."""
        return [
            s for s in self.seen if s.path != "/meta" and (method is None or s.method == method)
        ]

    def meta_requests(self) -> int:
        return sum(1 for s in self.seen if s.path == "/meta")

    def _answer(self, seen: Seen) -> Answer:
        with self._lock:
            self.seen.append(seen)
            if seen.path == "/meta":
                return Answer(200, self.meta) if self.meta else _error(404, "not found")
            if self._queued:
                return self._queued.popleft()
        return _default_answer(seen)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                path = unquote(parts.path)
                seen = Seen(
                    self.command,
                    path[len(PREFIX) :] if path.startswith(PREFIX) else path,
                    parse_qs(parts.query),
                    dict(self.headers.items()),
                    json.loads(raw) if raw else None,
                )
                answer = fake._answer(seen)
                data = b"" if answer.body is None else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in answer.headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _handle

            def log_message(self, *_args: Any) -> None:
                pass

        return Handler


def _error(status: int, message: str, details: Any = None) -> Answer:
    error = {"message": message, "type": "invalid_request_error", "code": "error", "param": None}
    return Answer(status, {"error": {**error, "details": details}})


def _listing(data: list[Any]) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": False}


def _default_answer(seen: Seen) -> Answer:
    """Toolscope's answer shapes, filled from the request."""
    body = seen.body or {}
    if seen.path == "/messages/tools" and seen.method == "POST":
        tools = [{**tool, "messageId": body["messageId"]} for tool in body["tools"]]
        return Answer(201, _listing(tools))
    if seen.path == "/messages/tools":
        ids = ",".join(seen.query.get("messageIds", [])).split(",")
        return Answer(200, _listing([{"messageId": i} for i in ids if i]))
    if "/rounds/" in seen.path:
        message_id = seen.path.split("/")[4]
        return Answer(201, {"object": "message", "id": message_id, "tool_calls": body["calls"]})
    if seen.path.endswith("/messages"):
        return Answer(201, _listing(body["messages"]))
    if seen.path.endswith("/turns"):
        return Answer(201, {"object": "turn", **body})
    if seen.method == "GET":
        return Answer(200, {"object": "conversation", "id": seen.path.split("/")[2]})
    return Answer(201, {"object": "ok", **body})
