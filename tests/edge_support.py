"""Raw HTTP for the tests of the server's edges (tests/test_server_gunicorn_edges.py and
tests/test_server_nginx.py): requests as an agent's client or an attacker sends them, byte by
byte."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any

import requests


def raw(address: tuple[str, int], request: bytes, timeout: float = 10) -> http.client.HTTPResponse:
    """Send `request` as it is; the answer, read in full (`.data`)."""
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(request)
        return read_response(sock)


def read_response(sock: socket.socket) -> Any:
    response = http.client.HTTPResponse(sock)
    response.begin()
    response.data = response.read()  # type: ignore[attr-defined]
    return response


def json_error(response: Any, status: int) -> dict[str, Any]:
    """The error object of the API's JSON error document, checked."""
    assert response.status == status, response.data
    assert response.getheader("Content-Type") == "application/json"
    assert response.getheader("X-Content-Type-Options") == "nosniff"
    error = json.loads(response.data)["error"]
    assert error["message"] and error["code"] and error["type"]
    return error


def post_head(length: int, key: str | None, path: str = "/api/v1/messages/tools") -> bytes:
    """The head of a POST (by default to /messages/tools) announcing `length` bytes of body."""
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: test\r\n"
        f"{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def slow_posts(address: tuple[str, int], count: int, key: str | None) -> list[socket.socket]:
    """Connections that announce 1,000 bytes and send 14 (issue 13's probe)."""
    slow = []
    for _ in range(count):
        sock = socket.create_connection(address, timeout=10)
        sock.sendall(post_head(1000, key) + b'{"messageId":"m"')
        slow.append(sock)
    return slow


def ordinary_get(base_url: str, key: str) -> float:
    """Seconds an ordinary read takes to be answered."""
    started = time.monotonic()
    response = requests.get(
        f"{base_url}/api/v1/messages/tools?messageIds=m",
        headers={"Authorization": f"Bearer {key}"},
        timeout=15,
    )
    assert response.status_code == 200
    return time.monotonic() - started


def long_ids_query(count: int = 200, length: int = 255) -> str:
    """`messageIds` as the unique_sdk sends them (commas as %2C): 200 ids of 255 characters
    make a 51.6 KB query string."""
    ids = ",".join(f"{i:03d}".ljust(length, "x") for i in range(count))
    return "messageIds=" + requests.utils.quote(ids, safe="")
