"""What the benchmark runs against: scratch databases and a gunicorn server of our own.

Everything is loopback-only and cleaned up afterwards: the SQLite file lives in a temporary
directory, the PostgreSQL database is created for the run and dropped at its end, and gunicorn
is stopped even when the run fails.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa

STARTUP_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
BENCH_PROJECT = "bench"
# Runs the installed `toolscope` command with this interpreter, wherever the script landed.
_TOOLSCOPE = [sys.executable, "-c", "from webapp.cli import main; main()"]


@dataclass
class Server:
    """A running Toolscope API the load generator can post to."""

    base_url: str
    key: str
    description: str
    startup_seconds: float | None = None
    pid: int | None = None


class BenchSetupError(RuntimeError):
    """The benchmark could not prepare its database or server."""


def require_loopback(url: str) -> None:
    """The benchmark floods its target: refuse anything but this machine."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise BenchSetupError(f"--url must point at a loopback address (127.0.0.1, ::1), not {host!r}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def scratch_sqlite(keep: bool = False, say: Any = print) -> Iterator[str]:
    if keep:
        directory = tempfile.mkdtemp(prefix="toolscope-bench-")
        url = f"sqlite:///{Path(directory) / 'bench.db'}"
        yield url
        say(f"  kept the scratch database {url} (--keep)")
        return
    with tempfile.TemporaryDirectory(prefix="toolscope-bench-") as directory:
        yield f"sqlite:///{Path(directory) / 'bench.db'}"


@contextlib.contextmanager
def scratch_project(
    database_url: str, base_url: str, run_id: str, *, keep: bool, say: Any = print
) -> Iterator[str]:
    """A project of the run's own (`bench-<run id>`) with a key, in the database of the server
    at `base_url`; the key is checked against the server (which must use that database), and
    the project is deleted with every row the run wrote into it afterwards, unless `keep`."""
    from .. import create_app
    from ..auth import create_key, get_or_create_project
    from ..db import begin_write, db
    from ..models import Project

    app = create_app({"DATABASE_URL": database_url, "SECRET_KEY": "bench"})
    slug = f"{run_id}"
    with app.app_context():
        try:
            project = get_or_create_project(slug)
            project_id = project.id
            _key, plain = create_key(project, "bench")
            db.session.commit()
        finally:
            db.session.remove()
    try:
        status = _status(base_url, "/api/v1/calls?limit=1", plain)
        if status != 200:
            raise BenchSetupError(
                f"the server at {base_url} does not accept a key made in {_safe(database_url)} "
                f"(HTTP {status}): run the bench with the server's database "
                "(--server-database-url or the server's TOOLSCOPE_DATABASE_URL)"
            )
        yield plain
    finally:
        with app.app_context():
            try:
                if keep:
                    say(f"  kept the bench's project {slug!r} (--keep)")
                else:
                    begin_write()
                    db.session.execute(sa.delete(Project).where(Project.id == project_id))
                    db.session.commit()
            finally:
                db.session.remove()
                db.engine.dispose()


def _status(base_url: str, path: str, key: str) -> int:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        return conn.getresponse().status
    except OSError as exc:
        raise BenchSetupError(f"cannot reach the server at {base_url}: {exc}") from exc
    finally:
        conn.close()


def _safe(database_url: str) -> str:
    return sa.engine.make_url(database_url).render_as_string(hide_password=True)


@contextlib.contextmanager
def scratch_postgres(server_url: str, keep: bool = False, say: Any = print) -> Iterator[str]:
    """A database of its own on the PostgreSQL server of `server_url`, dropped afterwards
    (needs the CREATEDB privilege); the database named in the URL is never written to."""
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"toolscope_bench_{secrets.token_hex(4)}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    except sa.exc.SQLAlchemyError as exc:
        admin.dispose()
        raise BenchSetupError(f"cannot create a scratch database on {server_url}: {exc}") from exc
    try:
        yield (
            sa.engine.make_url(server_url).set(database=name).render_as_string(hide_password=False)
        )
    finally:
        if keep:
            say(f"  kept the scratch database {name!r} (--keep)")
        else:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _toolscope(args: list[str], database_url: str) -> str:
    env = {**os.environ, "TOOLSCOPE_DATABASE_URL": database_url}
    done = subprocess.run(
        [*_TOOLSCOPE, *args], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise BenchSetupError(f"toolscope {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def prepare_database(database_url: str) -> str:
    """Apply the migrations as a deployment does (`toolscope db upgrade`, in a subprocess so
    Alembic's logging stays out of the report) and make a key for the bench project."""
    _toolscope(["db", "upgrade"], database_url)
    from .. import create_app
    from ..auth import create_key, get_or_create_project
    from ..db import db

    app = create_app({"DATABASE_URL": database_url, "SECRET_KEY": "bench"})
    with app.app_context():
        try:
            _key, plain = create_key(get_or_create_project(BENCH_PROJECT), "bench")
            db.session.commit()
        finally:
            db.session.remove()
            db.engine.dispose()
    return plain


def gunicorn_command(
    port: int, workers: int, worker_class: str | None, threads: int | None
) -> list[str]:
    """gunicorn with the production settings; `worker_class` None keeps the configured worker
    (gthread answering gunicorn's own errors as JSON), "gthread" is the same worker."""
    command = [
        sys.executable, "-m", "gunicorn",
        # The production settings (as in the Procfile); the flags below override them.
        "--config", "python:webapp.gunicorn_conf",
        "--workers", str(workers),
        "--bind", f"127.0.0.1:{port}",
        "--log-level", "warning",
        # Several servers may run at once (tests, a bench next to a dev server).
        "--no-control-socket",
    ]  # fmt: skip
    if worker_class not in (None, "gthread"):
        command += ["--worker-class", worker_class]
    if threads is not None and worker_class in (None, "gthread"):
        command += ["--threads", str(threads)]
    return [*command, "webapp:create_app()"]


def describe(workers: int, worker_class: str | None, threads: int | None) -> str:
    if worker_class in (None, "gthread"):
        kind = f"gthread ({threads or 'configured'} threads each)"
    else:
        kind = worker_class
    return f"gunicorn, {workers} {kind} workers"


@contextlib.contextmanager
def gunicorn_server(
    database_url: str,
    key: str,
    *,
    workers: int,
    worker_class: str | None = None,
    threads: int | None = None,
    settings: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """Start gunicorn on a free loopback port, wait until it answers, stop it afterwards.
    `settings` are more `TOOLSCOPE_...` environment variables for the server."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        **(settings or {}),
        "TOOLSCOPE_DATABASE_URL": database_url,
        # Fixed per run so no secret file is written into the instance folder.
        "TOOLSCOPE_SECRET_KEY": secrets.token_hex(16),
    }
    with tempfile.TemporaryFile(mode="w+") as log:
        started = time.monotonic()
        process = subprocess.Popen(
            gunicorn_command(port, workers, worker_class, threads),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_until_answering(process, port, log)
            yield Server(
                base_url=base_url,
                key=key,
                description=describe(workers, worker_class, threads),
                startup_seconds=time.monotonic() - started,
                pid=process.pid,
            )
        finally:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_answering(process: subprocess.Popen[bytes], port: int, log: object) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchSetupError(f"gunicorn exited at start:\n{_tail(log)}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/api/v1/messages/tools?messageIds=ready")
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.05)  # not listening yet
        finally:
            conn.close()
    raise BenchSetupError(f"gunicorn did not answer within {STARTUP_TIMEOUT_SECONDS} s")


def _tail(log: object) -> str:
    log.seek(0)  # type: ignore[attr-defined]
    return log.read()[-2000:]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class WorkerMemory:
    rss_mb: float
    # Pages only this worker uses: what another worker would add (shared pages count once).
    private_mb: float
    # Shared pages split between the processes that share them.
    pss_mb: float = 0.0


def _children(master_pid: int) -> list[Path]:
    """/proc entries of the master's children: its workers and its token pass process."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if _proc_fields(entry / "status").get("PPid") == str(master_pid):
                children.append(entry)
        except OSError:
            continue  # gone, or not ours to read
    return children


def _is_token_process(entry: Path) -> bool:
    from ..token_process import MODULE

    try:
        return MODULE.encode() in (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def _workers(master_pid: int) -> list[Path]:
    """/proc entries of the gunicorn workers (the children of the master but the token pass)."""
    return [entry for entry in _children(master_pid) if not _is_token_process(entry)]


def worker_cpu_seconds(master_pid: int) -> dict[int, float]:
    """CPU time (user + system) each worker has used so far, by pid; under the master's own
    pid, what the workers that have exited used (the master's reaped children's time).

    gunicorn replaces a worker after ``max_requests``, several times in a long run: without
    the exited workers' time a difference of two readings would leave out everything the
    retired worker did (a run's CPU came out too low, once below zero)."""
    times = {}
    # The token pass process too: its CPU is part of what a call costs the server.
    for entry in _children(master_pid):
        fields = _stat_fields(entry)
        if fields is not None:
            times[int(entry.name)] = _seconds(fields[11], fields[12])  # utime, stime
    master = _stat_fields(Path(f"/proc/{master_pid}"))
    if master is not None:
        times[master_pid] = _seconds(master[13], master[14])  # cutime, cstime
    return times


def _stat_fields(entry: Path) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 first); None if gone."""
    try:
        # The command name (field 2) may hold spaces; the fields after it are fixed.
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _seconds(*ticks: str) -> float:
    return sum(map(int, ticks)) / os.sysconf("SC_CLK_TCK")


def worker_memory(master_pid: int) -> list[WorkerMemory]:
    """Memory of each gunicorn web worker, from /proc."""
    return sorted(
        (m for m in map(_memory, _workers(master_pid)) if m is not None), key=lambda w: w.rss_mb
    )


def token_process_memory(master_pid: int) -> list[WorkerMemory]:
    """Memory of the server's token pass process (none when the pass is off)."""
    entries = [e for e in _children(master_pid) if _is_token_process(e)]
    return [m for m in map(_memory, entries) if m is not None]


def _memory(entry: Path) -> WorkerMemory | None:
    try:
        rollup = _proc_fields(entry / "smaps_rollup")
    except OSError:
        return None
    private = sum(_kb(rollup.get(k, "0 kB")) for k in ("Private_Clean", "Private_Dirty"))
    return WorkerMemory(
        _kb(rollup.get("Rss", "0 kB")) / 1024,
        private / 1024,
        _kb(rollup.get("Pss", "0 kB")) / 1024,
    )


def _proc_fields(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in lines)}


def _kb(value: str) -> int:
    return int(value.split()[0])
