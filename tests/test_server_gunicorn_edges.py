"""The edges of a real gunicorn server with the production settings (webapp/gunicorn_conf.py):
what an agent's HTTP client sends that the test client never does (issue 13, defects 3, 6, 10).

One server (1 worker, 4 threads) serves the module. Its body deadline is 3 s, short enough
for a test.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
import unique_sdk
from edge_support import (
    json_error,
    long_ids_query,
    ordinary_get,
    post_head,
    raw,
    read_response,
    slow_posts,
)

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


def address(server: Server) -> tuple[str, int]:
    parts = urlsplit(server.base_url)
    return parts.hostname or "", parts.port or 80


def test_the_sdk_fetches_200_message_ids_of_64_characters(server, monkeypatch):
    monkeypatch.setattr(unique_sdk, "api_key", server.key)
    monkeypatch.setattr(unique_sdk, "app_id", "app-1")
    monkeypatch.setattr(unique_sdk, "api_base", server.base_url + "/api/v1")
    ids = [f"msg_{i:03d}_".ljust(64, "x") for i in range(200)]
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
    query = long_ids_query()
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
    assert json_error(raw(address(server), long_line), 414)["code"] == "uri_too_long"
    big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n"
    assert json_error(raw(address(server), big_header), 431)["code"] == "headers_too_large"
    garbage = b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n"
    assert json_error(raw(address(server), garbage), 400)["code"] == "malformed"


def test_a_413_reaches_a_client_that_sends_the_whole_body_before_reading(server):
    size = 12 * 1024 * 1024  # over MAX_BODY_BYTES (8 MiB)
    with socket.create_connection(address(server), timeout=10) as sock:
        sock.sendall(post_head(size, server.key, "/api/v1/conversations/c1/messages"))
        chunk = b" " * (1024 * 1024)
        for _ in range(size // len(chunk)):
            sock.sendall(chunk)  # a reset connection would fail here (BrokenPipeError)
        assert json_error(read_response(sock), 413)["code"] == "too_large"
        # The body was read to its end, so the connection serves the next request.
        sock.sendall(
            b"GET /api/v1/messages/tools?messageIds=m HTTP/1.1\r\nHost: test\r\n"
            + f"Authorization: Bearer {server.key}\r\n\r\n".encode()
        )
        assert read_response(sock).status == 200


def test_a_body_that_trickles_in_with_a_key_is_cut_off_at_the_deadline(server):
    with socket.create_connection(address(server), timeout=15) as sock:
        sock.sendall(post_head(1000, server.key) + b'{"messageId": "m"')
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
            response = read_response(sock)
            waited = time.monotonic() - started
        finally:
            stop.set()
            sender.join(timeout=2)
    assert json_error(response, 408)["code"] == "timeout"
    assert BODY_TIMEOUT - 0.5 < waited < BODY_TIMEOUT + 2


def test_a_slow_body_without_a_key_is_refused_before_it_arrives(server):
    slow = slow_posts(address(server), 8, key=None)
    try:
        for sock in slow:
            assert json_error(read_response(sock), 401)["type"] == "authentication_error"
    finally:
        for sock in slow:
            sock.close()


def test_closing_slow_connections_does_not_stall_the_worker(server):
    """gunicorn drains an unread body for up to 5 s, then closes the connection, lingering
    up to 2 s more for the client to finish. That lingering happens in the request's thread:
    on gunicorn's main loop, two slow clients stalled every other request for 3 s."""
    slow = slow_posts(address(server), 2, key=None)
    try:
        started = time.monotonic()
        latencies = []
        while time.monotonic() - started < 9:
            latencies.append(ordinary_get(server.base_url, server.key))
            time.sleep(0.1)
        assert max(latencies) < 1.0, latencies
    finally:
        for sock in slow:
            sock.close()
