"""deploy/nginx.conf, run as it is (ports changed) in front of gunicorn with the production
settings: slow clients never reach gunicorn, the SDK's long queries pass, and what nginx
refuses itself is the API's JSON error document (issue 13, defects 3 and 6). OTLP exports get
the OTLP limit, and its errors are a google.rpc.Status; a client that sends a refused body
whole before it reads gets the 413, from nginx and from gunicorn itself (issue 22, item 1).

Needs Debian's nginx (`apt-get install nginx-light`): skipped without it, a failure in CI.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from edge_support import (
    json_error,
    long_ids_query,
    ordinary_get,
    post_head,
    raw,
    read_response,
    slow_posts,
)
from google.rpc.status_pb2 import Status

from tests.otlp_support import agent_run, traces_json
from webapp.bench.server import (
    Server,
    free_port,
    gunicorn_server,
    prepare_database,
    scratch_sqlite,
)

CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "nginx.conf"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

if not os.path.exists(NGINX):
    if os.environ.get("CI"):
        raise RuntimeError(
            "CI needs nginx for tests/test_server_nginx.py (apt-get install nginx-light)"
        )
    pytest.skip("nginx is not installed", allow_module_level=True)

# The http context that /etc/nginx/nginx.conf would give; paths inside the test's directory.
MAIN = """
worker_processes 1;
pid nginx.pid;
error_log logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    include toolscope.conf;
}
"""


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nginx did not start listening")


@contextmanager
def nginx_in_front_of(upstream_port: int, prefix: Path, key: str) -> Iterator[Server]:
    """deploy/nginx.conf, listening on a free port, passing to `upstream_port`."""
    (prefix / "logs").mkdir()
    port = free_port()
    site = CONFIG.read_text()
    assert "listen 80;" in site and "server 127.0.0.1:8000;" in site
    site = site.replace("listen 80;", f"listen 127.0.0.1:{port};")
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
    (prefix / "toolscope.conf").write_text(site)
    (prefix / "nginx.conf").write_text(MAIN)
    process = subprocess.Popen(
        [NGINX, "-p", f"{prefix}/", "-c", "nginx.conf", "-g", "daemon off;"],
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until_listening(port, process, prefix / "logs" / "error.log")
        yield Server(base_url=f"http://127.0.0.1:{port}", key=key, description="nginx")
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def upstream() -> Iterator[Server]:
    """The gunicorn server behind nginx, also reached directly."""
    with scratch_sqlite() as database_url:
        key = prepare_database(database_url)
        with gunicorn_server(database_url, key, workers=1) as running:
            yield running


@pytest.fixture(scope="module")
def proxied(upstream: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """gunicorn behind nginx; `base_url` is nginx's."""
    port = urlsplit(upstream.base_url).port or 80
    with nginx_in_front_of(port, tmp_path_factory.mktemp("nginx"), upstream.key) as server:
        yield server


def address(server: Server) -> tuple[str, int]:
    return "127.0.0.1", urlsplit(server.base_url).port or 80


def test_slow_clients_do_not_reach_gunicorn(proxied):
    """50 slow bodies without a key and 50 with one: gunicorn's 4 threads never wait for
    them, so ordinary requests are answered at once."""
    slow = slow_posts(address(proxied), 50, key=None)
    slow += slow_posts(address(proxied), 50, key=proxied.key)
    try:
        latencies = [ordinary_get(proxied.base_url, proxied.key) for _ in range(12)]
        assert max(latencies) < 1.0, latencies
    finally:
        for sock in slow:
            sock.close()


def test_200_message_ids_of_the_longest_length_pass(proxied):
    answer = requests.get(
        f"{proxied.base_url}/api/v1/messages/tools?{long_ids_query()}",
        headers={"Authorization": f"Bearer {proxied.key}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


def test_nginx_refusals_are_the_json_error_document(proxied):
    too_large = requests.post(
        f"{proxied.base_url}/api/v1/messages/tools",
        data=b" " * (9 * 1024 * 1024),
        headers={"Authorization": f"Bearer {proxied.key}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "too_large"
    long_line = b"GET /api/v1/messages/tools?messageIds=" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"
    assert json_error(raw(address(proxied), long_line), 414)["code"] == "uri_too_long"
    big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 70_000 + b"\r\n\r\n"
    assert json_error(raw(address(proxied), big_header), 400)["code"] == "malformed"


def test_errors_of_the_app_pass_through_unchanged(proxied):
    refused = requests.get(f"{proxied.base_url}/api/v1/messages/tools?messageIds=m", timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "authentication_error"


# --- OTLP (issue 22, item 1) -------------------------------------------------------------------

OTLP_LIMIT = 32 * 1024 * 1024  # TOOLSCOPE_OTLP_MAX_BODY_BYTES's default
JSON, PROTOBUF = "application/json", "application/x-protobuf"


def otlp_status(response: Any, status: int, content_type: str, grpc_code: int) -> str:
    """The message of an OTLP error answer: a google.rpc.Status in the request's encoding."""
    assert response.status == status, response.data[:300]
    assert response.getheader("Content-Type") == content_type
    if content_type == PROTOBUF:
        decoded = Status.FromString(response.data)
        assert decoded.code == grpc_code
        return decoded.message
    document = json.loads(response.data)
    assert document["code"] == grpc_code
    return document["message"]


def test_an_18_mb_otlp_export_passes_and_is_stored(proxied):
    """16 agent runs of 8 rounds with a long document in the prompt: 592 spans, about the
    batch of 512 an SDK sends, and 19 MB of OTLP/JSON, uncompressed as exporters send it."""
    prompt = "Summarize this document. " + "lorem ipsum dolor sit amet " * 5200
    spans = []
    for i in range(16):
        run = agent_run(100 + i, rounds=8, parallel=4, conversation=f"big-{i}", prompt=prompt)
        spans += run.spans
    body = traces_json(spans)
    assert 18_000_000 < len(body) < OTLP_LIMIT
    headers = {"Authorization": f"Bearer {proxied.key}", "Content-Type": JSON}
    answer = requests.post(f"{proxied.base_url}/v1/traces", data=body, headers=headers, timeout=120)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json() == {}
    for i in (0, 15):
        stored = requests.get(
            f"{proxied.base_url}/api/v1/conversations/big-{i}", headers=headers, timeout=10
        )
        assert stored.status_code == 200, stored.text[:300]
        user, assistant = stored.json()["messages"]
        assert user["content"] == prompt
        assert assistant["status"] == "completed"
    # The API's paths keep their own limit of 8 MiB.
    refused = requests.post(
        f"{proxied.base_url}/api/v1/conversations/big-0/messages",
        data=body,
        headers=headers,
        timeout=10,
    )
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "too_large"


def send_whole_then_read(
    address: tuple[str, int], path: str, length: int, key: str, content_type: str
) -> Any:
    """A client that writes its whole body, `length` bytes, before it reads the answer."""
    sock = socket.create_connection(address, timeout=30)
    head = post_head(length, key, path).replace(b"application/json", content_type.encode())
    sock.sendall(head)
    chunk = b" " * (1024 * 1024)
    sent = 0
    while sent < length:
        piece = chunk[: min(len(chunk), length - sent)]
        sock.sendall(piece)  # a connection closed unread fails here (BrokenPipeError, reset)
        sent += len(piece)
    response = read_response(sock)
    response.sock = sock  # type: ignore[attr-defined]
    return response


@pytest.mark.parametrize("via", ["gunicorn", "nginx"])
@pytest.mark.parametrize(
    ("path", "content_type"),
    [("/v1/traces", JSON), ("/v1/logs", PROTOBUF), ("/api/otlp/v1/traces", PROTOBUF)],
)
def test_an_export_over_the_limit_sent_whole_gets_its_413(via, path, content_type, request):
    server = request.getfixturevalue("proxied" if via == "nginx" else "upstream")
    length = OTLP_LIMIT + 1024 * 1024
    response = send_whole_then_read(address(server), path, length, server.key, content_type)
    with response.sock:
        message = otlp_status(response, 413, content_type, grpc_code=8)
        assert str(OTLP_LIMIT) in message
        if via == "gunicorn":
            # The body was read to its end: the connection serves the next request.
            response.sock.sendall(
                b"GET /api/v1/messages/tools?messageIds=m HTTP/1.1\r\nHost: test\r\n"
                + f"Authorization: Bearer {server.key}\r\n\r\n".encode()
            )
            assert read_response(response.sock).status == 200


def test_gunicorn_does_not_read_a_refused_body_without_end(upstream):
    """A body announced over DISCARD_MAX_BYTES is not read at all: the answer comes at once
    and the connection is closed, so a hostile client cannot keep the thread reading."""
    from webapp.body_deadline import DISCARD_MAX_BYTES

    with socket.create_connection(address(upstream), timeout=10) as sock:
        sock.sendall(post_head(DISCARD_MAX_BYTES + 1, upstream.key, "/v1/traces"))
        sock.sendall(b" " * 1024)
        started = time.monotonic()
        response = read_response(sock)
        otlp_status(response, 413, JSON, grpc_code=8)
        assert time.monotonic() - started < 1
        with contextlib.suppress(ConnectionResetError):
            assert sock.recv(1) == b""  # closed: end of stream (or reset: bytes left unread)
        assert time.monotonic() - started < 1


def test_otlp_errors_of_nginx_are_a_status_when_gunicorn_is_down(tmp_path, upstream):
    closed_port = free_port()
    with nginx_in_front_of(closed_port, tmp_path, upstream.key) as server:
        for content_type in (JSON, PROTOBUF):
            body = b"{}" if content_type == JSON else b""
            head = post_head(len(body), server.key, "/v1/traces")
            head = head.replace(b"application/json", content_type.encode())
            response = raw(address(server), head + body)
            assert otlp_status(response, 502, content_type, grpc_code=14)  # status kept
            assert response.getheader("Retry-After") == "1"
        # The API's paths are unchanged: nginx's own page, which clients retry as a 502.
        assert raw(address(server), post_head(2, server.key) + b"{}").status == 502
