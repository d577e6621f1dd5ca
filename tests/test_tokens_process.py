"""The token pass runs in a process of its own that gunicorn's master starts (issue 10, item 6).

A server started as the Procfile starts it: its web workers store writes without ever loading
the tokenizer (~80 MB each), the token pass process counts what they stored (calls and message
contents), is started again when it dies, and stops with the server.

Whether a process holds the tokenizer is read from /proc/<pid>/maps: `webapp.tokens` imports
tiktoken (a Rust extension, `tiktoken/_tiktoken*.so`) only to load an encoding or to pick one
for a model, i.e. only to count, so the module is mapped exactly in the processes that counted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from server_support import procfile_server

from webapp import create_app
from webapp.auth import create_key, get_or_create_project
from webapp.db import db
from webapp.token_process import MODULE, TokenProcess

TURN = {
    "user": {"id": "u{n}", "role": "user", "content": "Where is order {n}?"},
    "assistant": {
        "id": "a{n}",
        "model": "gpt-4o",
        "content": "Order {n} is packed.",
        "rounds": [
            {
                "calls": [
                    {
                        "id": "call_{n}",
                        "name": "get_order",
                        "arguments": {"order_id": "{n}"},
                        "response": {"content": '{{"status": "packed"}}'},
                    }
                ]
            }
        ],
    },
}

PENDING_SQL = """
SELECT (SELECT count(*) FROM tool_invocation
        WHERE (arguments IS NOT NULL AND arguments_tokens IS NULL)
           OR (response IS NOT NULL AND response_tokens IS NULL))
     + (SELECT count(*) FROM message
        WHERE content IS NOT NULL AND content != '' AND content_tokens IS NULL)
"""


def _turn(n: int) -> dict:
    def fill(value):
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        return value.format(n=n) if isinstance(value, str) else value

    return fill(TURN)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                status = (entry / "status").read_text()
                if f"\nPPid:\t{pid}\n" in status:
                    found.append(int(entry.name))
    return found


def _is_token_process(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return False


def _holds_tokenizer(pid: int) -> bool:
    return "_tiktoken" in Path(f"/proc/{pid}/maps").read_text()


def _token_processes(master: int) -> list[int]:
    return [pid for pid in _children(master) if _is_token_process(pid)]


def _wait_for(what: str, check, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.1)
    return value


def _pending(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(PENDING_SQL).fetchone()[0]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str, str, Path]]:
    """A gunicorn server with the Procfile's settings (2 workers) on a scratch SQLite file."""
    path = tmp_path / "tokens.db"
    url = f"sqlite:///{path}"
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "t"})
    with app.app_context():
        db.create_all()
        _row, key = create_key(get_or_create_project("default"), "writer")
        db.session.commit()
        db.session.remove()
        db.engine.dispose()
    settings = {
        "TOOLSCOPE_DATABASE_URL": url,
        "TOOLSCOPE_SECRET_KEY": "t",
        "TOOLSCOPE_TOKEN_PASS_SECONDS": "0.1",
    }
    with procfile_server(settings) as (process, base, _log):
        yield process, base, key, path


def _post_turns(base: str, key: str, numbers: range) -> None:
    for n in numbers:
        # A new connection each time, so both workers get some of the writes.
        answer = requests.post(
            f"{base}/api/v1/conversations/c{n}/turns",
            json=_turn(n),
            headers={"Authorization": f"Bearer {key}", "Connection": "close"},
            timeout=10,
        )
        assert answer.status_code == 201, answer.text
        user = answer.json()["user"]
        assert user["content"] and user["content_tokens"] is None  # left to the pass


def test_web_workers_never_load_the_tokenizer_the_pass_process_counts(server):
    master, base, key, path = server
    (token_process,) = _wait_for("the token pass process", lambda: _token_processes(master.pid))
    workers = _wait_for(
        "both workers",
        lambda: (
            [p for p in _children(master.pid) if p != token_process][1:]
            and [p for p in _children(master.pid) if p != token_process]
        ),
    )
    assert len(workers) == 2

    _post_turns(base, key, range(20))
    _wait_for("every count stored", lambda: _pending(path) == 0)

    assert _holds_tokenizer(token_process)
    assert not [pid for pid in (master.pid, *workers) if _holds_tokenizer(pid)]
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT min(content_tokens) FROM message").fetchone()[0] > 0


def test_the_pass_process_is_started_again_when_it_dies_and_stops_with_the_server(server):
    master, base, key, path = server
    (first,) = _wait_for("the token pass process", lambda: _token_processes(master.pid))
    os.kill(first, signal.SIGKILL)
    (second,) = _wait_for(
        "a new token pass process", lambda: [p for p in _token_processes(master.pid) if p != first]
    )
    _post_turns(base, key, range(3))
    _wait_for("every count stored", lambda: _pending(path) == 0)

    master.send_signal(signal.SIGTERM)  # gunicorn's graceful stop
    master.wait(30)
    assert not Path(f"/proc/{second}").exists()


def _gunicorn_server(app):
    class Loaded:
        def wsgi(self):
            return app

    class Server:
        pass

    server = Server()
    server.app = Loaded()
    return server


def test_when_ready_starts_no_process_when_the_pass_and_the_runs_are_off(app):
    from webapp import gunicorn_conf

    app.config["TOKEN_PASS_SECONDS"] = 0
    app.config["RUN_WORKERS"] = 0
    off = _gunicorn_server(app)
    gunicorn_conf.when_ready(off)
    assert not hasattr(off, "token_process")
    gunicorn_conf.on_exit(off)  # nothing to stop


def test_when_ready_starts_the_process_for_the_runs_alone(app, monkeypatch):
    """The runs are sent from the token pass process: with the pass off and RUN_WORKERS on,
    the process still starts (it then runs the run worker only)."""
    from webapp import gunicorn_conf

    started: list[TokenProcess] = []
    monkeypatch.setattr(TokenProcess, "start", lambda self: started.append(self))
    app.config["TOKEN_PASS_SECONDS"] = 0
    app.config["RUN_WORKERS"] = 2
    runs_only = _gunicorn_server(app)
    gunicorn_conf.when_ready(runs_only)
    assert [process.interval for process in started] == [0]
    assert started[0].doorbell_fd is not None  # a web worker's POST wakes its run worker
    gunicorn_conf.on_exit(runs_only)  # closes the doorbell


def test_stop_ends_a_process_that_ignores_sigterm(tmp_path):
    process = TokenProcess("sqlite://", 1.0)
    ignores_sigterm = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    process.process = subprocess.Popen(["python3", "-c", ignores_sigterm], stdout=subprocess.PIPE)
    assert process.process.stdout.readline() == b"ready\n"
    started = time.monotonic()
    process.stop(timeout=0.5)
    assert process.process.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 10
    process.process.stdout.close()


def test_the_provider_sdks_are_imported_by_the_first_run_not_when_the_run_worker_starts():
    """The provider SDKs cost ~1.5 s of CPU to import. The token pass process, which runs the
    run worker, starts with the server, as agents' first writes arrive: it must not pay that
    unless a run is sent. (Imported at a low priority instead, the import starved on a busy
    machine and runs waited minutes.) The run worker's modules load without them; sending a
    run imports them (tests/test_server_run_worker.py sends runs through that process)."""
    probe = (
        "import sys\n"
        "from webapp.services import model_runs, run_worker, providers\n"
        "from webapp import token_process\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))\n"
        "providers._sdks()\n"
        "print(sorted(m for m in ('openai', 'anthropic') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "['anthropic', 'openai']"]
