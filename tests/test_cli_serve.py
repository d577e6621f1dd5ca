"""`toolscope serve` really serves: the README's run command depends on it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_http_on_the_given_port(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TOOLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
        "TOOLSCOPE_DEV": "1",
    }
    subprocess.run([BIN / "toolscope", "db", "upgrade"], env=env, check=True, capture_output=True)
    port = _free_port()
    server = subprocess.Popen(
        [BIN / "toolscope", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                page = requests.get(f"http://127.0.0.1:{port}/conversations", timeout=2)
                break
            except requests.ConnectionError:
                assert server.poll() is None, server.stdout.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "toolscope serve did not start in 30 s"
                time.sleep(0.2)
        assert page.status_code == 200
        assert "Conversations" in page.text
    finally:
        server.terminate()
        server.wait(timeout=10)
        server.stdout.close()  # type: ignore[union-attr]
