"""`toolscope bench`: ingestion throughput through a real gunicorn, next to the raw insert rate.

By default it starts its own gunicorn on a scratch SQLite file (migrated, with a fresh key) on a
free loopback port; with `--database-url` it does the same on a scratch PostgreSQL database too.
With `--url`/`--key` it drives a server that is already running instead. See docs/benchmark.md.

    toolscope bench                                  # 10 s per endpoint, 4 client processes
    toolscope bench --seconds 3 --only ingest
    toolscope bench --database-url postgresql+psycopg://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import click

from . import otlp, raw_insert, reads, redaction, replay, runs, search  # noqa: F401  (each registers its section)
from .load import LoadGenerator
from .sections import SECTIONS, BenchContext, Figure
from .server import (
    BenchSetupError,
    Server,
    WorkerMemory,
    gunicorn_server,
    prepare_database,
    require_loopback,
    scratch_postgres,
    scratch_project,
    scratch_sqlite,
    token_process_memory,
    worker_memory,
)

# As in production (webapp/gunicorn_conf.py); docs/benchmark.md compares sync and gthread.
DEFAULT_WORKER_CLASS = "gthread"
DEFAULT_THREADS = 4
MAX_SECONDS = 600.0
MAX_CALLS = 10_000_000


@dataclass
class TargetReport:
    name: str
    server: str
    startup_seconds: float | None = None
    worker_memory: list[dict[str, float]] = field(default_factory=list)
    token_process_memory: list[dict[str, float]] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


@dataclass
class Target:
    """One thing to measure: a database, and the server writing to it (if any)."""

    name: str
    database_url: str | None  # where raw inserts go
    server: Server | None
    server_database_url: str | None  # the server's own database, to count stored rows


@click.command("bench")
@click.option(
    "--seconds",
    type=click.FloatRange(0.5, MAX_SECONDS),
    default=10.0,
    show_default=True,
    help="Measured time per endpoint (and per raw insert mode, at most 3 s).",
)
@click.option(
    "--calls",
    type=click.IntRange(50, MAX_CALLS),
    default=None,
    help="Post this many tool calls per endpoint instead of running for --seconds.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 32),
    default=4,
    show_default=True,
    help="Client processes, each with one keep-alive connection.",
)
@click.option(
    "--url",
    default=None,
    help="Drive this running server (loopback only) instead of starting gunicorn.",
)
@click.option(
    "--key",
    default=None,
    help="Not needed any more: with --url the bench makes a key for its own scratch project.",
)
@click.option(
    "--server-database-url",
    default=None,
    help="With --url: the database that server uses (default: this command's "
    "TOOLSCOPE_DATABASE_URL); the bench's scratch project is made there.",
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep what the run wrote: the scratch project (--url) or the scratch databases.",
)
@click.option(
    "--database-url",
    default=None,
    help="Also measure PostgreSQL: a scratch "
    "database is created on this server for the run and dropped afterwards.",
)
@click.option(
    "--postgresql-only",
    is_flag=True,
    help="With --database-url: measure PostgreSQL only (the SQLite run is skipped).",
)
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(sorted(SECTIONS)),
    help="Run only these sections (repeatable).",
)
@click.option("--workers", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option(
    "--worker-class",
    type=click.Choice(["sync", "gthread"]),
    default=DEFAULT_WORKER_CLASS,
    show_default=True,
)
@click.option(
    "--threads",
    type=click.IntRange(1, 64),
    default=DEFAULT_THREADS,
    show_default=True,
    help="Threads per gthread worker.",
)
@click.option(
    "--search-calls",
    type=click.IntRange(1_000, MAX_CALLS),
    default=None,
    help="calls-search: calls to search over (default 1,000,000 on SQLite, 200,000 on "
    "PostgreSQL).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def command(
    seconds: float,
    calls: int | None,
    concurrency: int,
    url: str | None,
    key: str | None,
    server_database_url: str | None,
    keep: bool,
    database_url: str | None,
    postgresql_only: bool,
    only: tuple[str, ...],
    workers: int,
    worker_class: str,
    threads: int,
    search_calls: int | None,
    as_json: bool,
) -> None:
    """Measure ingestion throughput (tool calls/s, requests/s, latency) and raw inserts."""
    if key and not url:
        raise click.UsageError("--key goes with --url")
    if postgresql_only and (url or not database_url):
        raise click.UsageError("--postgresql-only goes with --database-url (and without --url)")
    sections = (
        [SECTIONS[name] for name in only]
        if only
        else [s for s in SECTIONS.values() if s.by_default]
    )
    run_id = f"bench-{secrets.token_hex(3)}"
    server_options = {"workers": workers, "worker_class": worker_class, "threads": threads}

    def say(line: str) -> None:
        click.echo(line, err=True)

    if key:
        say("  --key is not needed: the bench makes a key for a scratch project of its own")
    reports: list[TargetReport] = []
    try:
        if url:
            require_loopback(url)
        needs_load = any(s.needs_server for s in sections)
        with LoadGenerator(concurrency) if needs_load else contextlib.nullcontext() as load:
            targets = _targets(
                url,
                server_database_url,
                database_url,
                sections,
                server_options,
                keep,
                run_id,
                say,
                sqlite=not postgresql_only,
            )
            for target_cm in targets:
                with target_cm as target:
                    say(f"{target.name}: {target.server.description if target.server else ''}")
                    report = _run_target(
                        target, sections, load, seconds, calls, run_id, say, search_calls
                    )
                    reports.append(report)
    except (BenchSetupError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(_as_json(reports, concurrency) if as_json else _as_text(reports, concurrency))
    if any(_failed(figure) for report in reports for figure in report.figures):
        raise SystemExit(1)


def _targets(
    url: str | None,
    server_database_url: str | None,
    database_url: str | None,
    sections: list[Any],
    server_options: dict[str, Any],
    keep: bool,
    run_id: str,
    say: Any,
    sqlite: bool = True,
) -> Iterator[contextlib.AbstractContextManager[Target]]:
    if url:
        yield _url_target(url, server_database_url, database_url, keep, run_id, say)
        return
    needs_server = any(s.needs_server for s in sections)
    if sqlite:
        yield _own_target("sqlite", scratch_sqlite(keep, say), needs_server, server_options)
    if database_url:
        yield _own_target(
            "postgresql", scratch_postgres(database_url, keep, say), needs_server, server_options
        )


@contextlib.contextmanager
def _url_target(
    url: str,
    server_database_url: str | None,
    database_url: str | None,
    keep: bool,
    run_id: str,
    say: Any,
) -> Iterator[Target]:
    """The running server, posting into a scratch project of the run's own in that server's
    database, deleted afterwards (unless --keep): nothing lands in the user's projects."""
    base_url = url.rstrip("/")
    server_db = server_database_url or _configured_database_url()
    with contextlib.ExitStack() as stack:
        key = stack.enter_context(scratch_project(server_db, base_url, run_id, keep=keep, say=say))
        server = Server(base_url=base_url, key=key, description=f"running server at {url}")
        raw_url = stack.enter_context(scratch_postgres(database_url)) if database_url else None
        if raw_url:
            prepare_database(raw_url)
        yield Target("url", raw_url, server, server_db)


def _configured_database_url() -> str:
    """The database this command is configured with (TOOLSCOPE_DATABASE_URL, else the
    default), which a server on this machine started the same way uses too."""
    from .. import create_app

    return create_app().config["DATABASE_URL"]


@contextlib.contextmanager
def _own_target(
    name: str,
    database: contextlib.AbstractContextManager[str],
    needs_server: bool,
    server_options: dict[str, Any],
) -> Iterator[Target]:
    with database as database_url:
        key = prepare_database(database_url)
        if not needs_server:
            yield Target(name, database_url, None, database_url)
            return
        with gunicorn_server(database_url, key, **server_options) as server:
            yield Target(name, database_url, server, database_url)


def _run_target(
    target: Target,
    sections: list[Any],
    load: LoadGenerator | None,
    seconds: float,
    calls: int | None,
    run_id: str,
    say: Any,
    search_calls: int | None = None,
) -> TargetReport:
    server = target.server
    report = TargetReport(
        name=target.name,
        server=server.description if server else "no server",
        startup_seconds=server.startup_seconds if server else None,
    )
    ctx = BenchContext(
        target=target.name,
        seconds=seconds,
        calls=calls,
        database_url=target.database_url,
        server=server,
        load=load,
        run_id=run_id,
        say=say,
        server_database_url=target.server_database_url,
        search_calls=search_calls,
    )
    for section in sections:
        if section.needs_server and server is None:
            continue
        if section.needs_database and target.database_url is None:
            say(f"  {section.name}: skipped (needs --database-url with --url)")
            continue
        report.figures.extend(section.run(ctx))
    if server and server.pid:
        report.worker_memory = [_memory_values(w) for w in worker_memory(server.pid)]
        report.token_process_memory = [
            _memory_values(w) for w in token_process_memory(server.pid)
        ]
    return report


def _memory_values(memory: WorkerMemory) -> dict[str, float]:
    return {
        "rss_mb": round(memory.rss_mb, 1),
        "pss_mb": round(memory.pss_mb, 1),
        "private_mb": round(memory.private_mb, 1),
    }


def _failed(figure: Figure) -> bool:
    values = figure.values
    lost = "stored_calls" in values and values["stored_calls"] != values.get("calls")
    return bool(values.get("errors")) or lost


def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def _as_text(reports: list[TargetReport], concurrency: int) -> str:
    machine = _machine()
    lines = [
        f"Toolscope bench: {machine['cpus']} CPUs, Python {machine['python']}, "
        f"{concurrency} client processes, batches of 50 tool calls"
    ]
    for report in reports:
        startup = (
            f", first answer {report.startup_seconds:.2f} s after start"
            if report.startup_seconds is not None
            else ""
        )
        lines.append("")
        lines.append(f"[{report.name}] {report.server}{startup}")
        width = max((len(f.label) for f in report.figures), default=0)
        for figure in report.figures:
            lines.append(f"  {figure.label:<{width}}  {figure.text}")
        if report.worker_memory:
            sizes = ", ".join(map(_memory_text, report.worker_memory))
            lines.append(f"  worker memory after the run, RSS: {sizes}")
        if report.token_process_memory:
            sizes = ", ".join(map(_memory_text, report.token_process_memory))
            lines.append(f"  token pass process memory after the run, RSS: {sizes}")
    return "\n".join(lines)


def _memory_text(w: dict[str, float]) -> str:
    return f"{w['rss_mb']:.0f} MB (PSS {w['pss_mb']:.0f} MB, {w['private_mb']:.0f} MB private)"


def _as_json(reports: list[TargetReport], concurrency: int) -> str:
    return json.dumps(
        {
            "machine": _machine(),
            "client_processes": concurrency,
            "targets": [asdict(report) for report in reports],
        },
        indent=2,
    )
