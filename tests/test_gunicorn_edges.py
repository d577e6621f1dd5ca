"""The edges of a real gunicorn server with the production settings (webapp/gunicorn_conf.py):
what an agent's HTTP client sends that the test client never does (issue 13, defects 3, 6, 10).

One server (1 worker, 4 threads) serves the module. Its body deadline is 3 s, short enough
for a test.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlencode, urlsplit

import pytest
import requests
import unique_sdk

from webapp.bench.server import Server, gunicorn_server, prepare_database, scratch_sqlite

BODY_TIMEOUT = 3.0
USER, COMPANY = "user-1", "company-1"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with scratch_sqlite() as database_url:
        key = prepare_database(database_url)
        settings = {"TOOLSCOPE_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT)}
        with gunicorn_server(database_url, key, workers=1, settings=settings) as running:
            yield running


def _address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.base_url)
    return parts.hostname or "", parts.port or 80


def _raw(server: Server, request: bytes, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are; the status, headers and body of the answer."""
    with socket.create_connection(_address(server), timeout=timeout) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


def _assert_json_error(status: int, headers: dict[str, str], body: bytes, expected: int) -> dict:
    assert status == expected, body
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Content-Type-Options"] == "nosniff"
    error = json.loads(body)["error"]
    assert error["message"] and error["code"] and error["type"] == "invalid_request_error"
    return error


def test_the_sdk_fetches_200_message_ids_of_64_characters(server, monkeypatch):
    monkeypatch.setattr(unique_sdk, "api_key", server.key)
    monkeypatch.setattr(unique_sdk, "app_id", "app-1")
    monkeypatch.setattr(unique_sdk, "api_base", server.base_url + "/api/v1")
    ids = [f"msg_{i:03d}_" + "x" * 56 for i in range(200)]
    tool = {"externalToolCallId": "c", "functionName": "f", "roundIndex": 0, "sequenceIndex": 0}
    for message_id in (ids[0], ids[199]):
        unique_sdk.MessageTool.create_many(
            user_id=USER, company_id=COMPANY, messageId=message_id, tools=[tool]
        )
    fetched = unique_sdk.MessageTool.get_message_tools(
        user_id=USER, company_id=COMPANY, messageIds=",".join(ids)
    )
    assert [t["messageId"] for t in fetched["data"]] == [ids[0], ids[199]]


def test_200_message_ids_of_the_longest_length_fit_in_one_request(server):
    ids = ",".join(f"{i:03d}" + "x" * 252 for i in range(200))
    query = urlencode({"messageIds": ids})  # commas as %2C, as the SDK sends them
    assert len(query) > 51_000
    answer = requests.get(
        f"{server.base_url}/api/v1/messages/tools?{query}",
        headers={"Authorization": f"Bearer {server.key}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == []


def test_requests_gunicorn_refuses_are_answered_with_the_json_error_document(server):
    long_line = b"GET /api/v1/messages/tools?messageIds=" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"
    error = _assert_json_error(*_raw(server, long_line), 414)
    assert error["code"] == "uri_too_long"
    big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n"
    assert _assert_json_error(*_raw(server, big_header), 431)["code"] == "headers_too_large"
    garbage = b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n"
    assert _assert_json_error(*_raw(server, garbage), 400)["code"] == "malformed"


def _post_head(server: Server, length: int, key: str | None) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        "POST /api/v1/messages/tools HTTP/1.1\r\nHost: test\r\n"
        f"{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_413_reaches_a_client_that_sends_the_whole_body_before_reading(server):
    size = 12 * 1024 * 1024  # over MAX_BODY_BYTES (8 MiB)
    with socket.create_connection(_address(server), timeout=10) as sock:
        sock.sendall(_post_head(server, size, server.key))
        chunk = b" " * (1024 * 1024)
        for _ in range(size // len(chunk)):
            sock.sendall(chunk)  # a reset connection would fail here (BrokenPipeError)
        response = http.client.HTTPResponse(sock)
        response.begin()
        body = response.read()
        assert response.status == 413, body
        assert json.loads(body)["error"]["code"] == "too_large"
        # The body was read to its end, so the connection serves the next request.
        sock.sendall(
            b"GET /api/v1/messages/tools?messageIds=m HTTP/1.1\r\nHost: test\r\n"
            + f"Authorization: Bearer {server.key}\r\n\r\n".encode()
        )
        again = http.client.HTTPResponse(sock)
        again.begin()
        assert again.status == 200, again.read()


def test_a_body_that_trickles_in_with_a_key_is_cut_off_at_the_deadline(server):
    with socket.create_connection(_address(server), timeout=15) as sock:
        sock.sendall(_post_head(server, 1000, server.key) + b'{"messageId": "m"')
        started = time.monotonic()
        stop = threading.Event()

        def trickle() -> None:
            # One byte every 0.2 s: each wait is short, only the total is too long.
            while not stop.wait(0.2):
                try:
                    sock.sendall(b" ")
                except OSError:
                    return

        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        try:
            response = http.client.HTTPResponse(sock)
            response.begin()
            waited = time.monotonic() - started
            body = response.read()
        finally:
            stop.set()
            sender.join(timeout=2)
    assert response.status == 408, body
    assert json.loads(body)["error"]["code"] == "timeout"
    assert BODY_TIMEOUT - 0.5 < waited < BODY_TIMEOUT + 2


def _slow_keyless_posts(server: Server, count: int) -> list[socket.socket]:
    """Connections that announce 1,000 bytes and send 14, without a key (issue 13's probe)."""
    slow = []
    for _ in range(count):
        sock = socket.create_connection(_address(server), timeout=10)
        sock.sendall(_post_head(server, 1000, None) + b'{"messageId":"m"')
        slow.append(sock)
    return slow


def _ordinary_get(server: Server) -> float:
    started = time.monotonic()
    response = requests.get(
        f"{server.base_url}/api/v1/messages/tools?messageIds=m",
        headers={"Authorization": f"Bearer {server.key}"},
        timeout=15,
    )
    assert response.status_code == 200
    return time.monotonic() - started


def test_a_slow_body_without_a_key_is_refused_before_it_arrives(server):
    slow = _slow_keyless_posts(server, 8)
    try:
        for sock in slow:
            response = http.client.HTTPResponse(sock)
            response.begin()
            assert response.status == 401
            assert json.loads(response.read())["error"]["type"] == "authentication_error"
    finally:
        for sock in slow:
            sock.close()


def test_closing_slow_connections_does_not_stall_the_worker(server):
    """gunicorn drains an unread body for up to 5 s, then closes the connection, lingering
    up to 2 s more for the client to finish. That lingering happens in the request's thread:
    on gunicorn's main loop, two slow clients stalled every other request for 3 s."""
    slow = _slow_keyless_posts(server, 2)
    try:
        started = time.monotonic()
        latencies = []
        while time.monotonic() - started < 9:
            latencies.append(_ordinary_get(server))
            time.sleep(0.1)
        assert max(latencies) < 1.0, latencies
    finally:
        for sock in slow:
            sock.close()
