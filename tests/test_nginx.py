"""deploy/nginx.conf, run as it is (ports changed) in front of gunicorn with the production
settings: slow clients never reach gunicorn, the SDK's long queries pass, and what nginx
refuses itself is the API's JSON error document (issue 13, defects 3 and 6).

Needs Debian's nginx (`apt-get install nginx-light`): skipped without it, a failure in CI.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
from edge_support import json_error, long_ids_query, ordinary_get, raw, slow_posts

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
        raise RuntimeError("CI needs nginx for tests/test_nginx.py (apt-get install nginx-light)")
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


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """gunicorn behind nginx; `base_url` is nginx's."""
    with scratch_sqlite() as database_url:
        key = prepare_database(database_url)
        with gunicorn_server(database_url, key, workers=1) as upstream:
            prefix = tmp_path_factory.mktemp("nginx")
            (prefix / "logs").mkdir()
            port = free_port()
            upstream_port = urlsplit(upstream.base_url).port
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
