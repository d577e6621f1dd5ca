"""`toolscope serve` really serves: the README's run command depends on it. It also runs the
token pass, as gunicorn's workers do: the calls an agent sends to `make run` get their counts."""

from __future__ import annotations

import os
import socket
import sqlite3
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
        _a_call_sent_to_it_gets_its_tokens_counted(env, port, tmp_path / "serve.db")
    finally:
        server.terminate()
        server.wait(timeout=10)
        server.stdout.close()  # type: ignore[union-attr]


TURN = {
    "user": {"id": "u1", "role": "user", "content": "Where is order 1042?"},
    "assistant": {
        "id": "a1",
        "model": "gpt-4o",
        "rounds": [
            {
                "calls": [
                    {
                        "id": "call_1",
                        "name": "get_order",
                        "arguments": {"order_id": "1042"},
                        "response": {"content": '{"status": "packed"}'},
                    }
                ]
            }
        ],
    },
}


def _a_call_sent_to_it_gets_its_tokens_counted(env: dict, port: int, path: Path) -> None:
    key = subprocess.run(
        [BIN / "toolscope", "keys", "create"], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    answer = requests.post(
        f"http://127.0.0.1:{port}/api/v1/conversations/c1/turns",
        json=TURN,
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    deadline = time.monotonic() + 20
    while True:
        with sqlite3.connect(path) as db:
            counts = db.execute(
                "SELECT arguments_tokens, response_tokens FROM tool_invocation"
            ).fetchall()
        if counts and None not in counts[0]:
            break
        assert time.monotonic() < deadline, f"the token pass did not count the call: {counts}"
        time.sleep(0.2)
    assert counts[0][0] > 0 and counts[0][1] > 0


def test_a_busy_port_fails_before_the_url_is_printed(tmp_path: Path) -> None:
    """`make run PORT=...` picks another port; a busy one is said so, and no URL is announced
    for a server that never started."""
    env = {
        **os.environ,
        "TOOLSCOPE_DATABASE_URL": f"sqlite:///{tmp_path / 'busy.db'}",
        "TOOLSCOPE_DEV": "1",
        "TOOLSCOPE_TOKEN_PASS_SECONDS": "0",
    }
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(
            [BIN / "toolscope", "serve", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode != 0
    assert "http://" not in done.stdout + done.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr
    assert "make run PORT=" in done.stderr
