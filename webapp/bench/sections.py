"""The benchmark's sections: a registry, so other areas can add their own figure.

A section is a function `(BenchContext) -> list[Figure]` registered with `@section(...)`; the
command runs the registered sections in order (or those named with `--only`) for every target.
To add one (e.g. a replay figure), write it here or import its module from `webapp.bench`:

    @section("replay", "Replay of a 10,000-call conversation", needs_server=False)
    def replay_section(ctx: BenchContext) -> list[Figure]:
        ...
        text = f"{ms:.0f} ms"
        return [Figure("replay", ctx.target, "replay core, 10,000 calls", {"ms": ms}, text)]
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .load import CALLS_PER_REQUEST, ENDPOINT_LABELS, WARM_UP_MARK, Job, LoadGenerator
from .server import Server, worker_cpu_seconds

# Long enough for every server worker to have loaded what it loads on first use.
MAX_WARM_UP_SECONDS = 1.0


@dataclass
class BenchContext:
    """What a section gets: where to point, for how long, and the shared load generator."""

    target: str  # "sqlite", "postgresql" or "url"
    seconds: float
    calls: int | None
    database_url: str | None
    server: Server | None
    load: LoadGenerator | None  # None when no selected section needs a server
    run_id: str
    say: Callable[[str], None] = print
    # The database the server writes to, when the bench started it (None for --url).
    server_database_url: str | None = None
    # calls-search: how many calls to search over (None: the section's default).
    search_calls: int | None = None


@dataclass
class Figure:
    section: str
    target: str
    label: str
    values: dict[str, Any]
    text: str


@dataclass(frozen=True)
class Section:
    name: str
    help: str
    run: Callable[[BenchContext], list[Figure]]
    needs_server: bool = False
    needs_database: bool = False
    # Run without --only too (False: a long section that runs only when named).
    by_default: bool = True


SECTIONS: dict[str, Section] = {}


def section(
    name: str,
    help: str,
    *,
    needs_server: bool = False,
    needs_database: bool = False,
    by_default: bool = True,
) -> Callable[[Callable[[BenchContext], list[Figure]]], Callable[[BenchContext], list[Figure]]]:
    def register(run: Callable[[BenchContext], list[Figure]]):
        SECTIONS[name] = Section(name, help, run, needs_server, needs_database, by_default)
        return run

    return register


# -- ingest through HTTP ------------------------------------------------------------------------


@section(
    "ingest",
    "Tool calls posted in batches of 50 through HTTP: MessageTool API and native /turns",
    needs_server=True,
)
def ingest_section(ctx: BenchContext) -> list[Figure]:
    assert ctx.server is not None and ctx.load is not None
    figures = []
    for endpoint in ("messages-tools", "turns"):
        job = Job(
            endpoint=endpoint,
            base_url=ctx.server.base_url,
            key=ctx.server.key,
            seconds=ctx.seconds,
            requests_per_process=_requests_per_process(ctx),
            run_id=ctx.run_id,
            warm_up_seconds=min(MAX_WARM_UP_SECONDS, ctx.seconds / 4),
        )
        ctx.say(f"  {ENDPOINT_LABELS[endpoint]} ...")
        # From the start line on: the warm-up's requests are not counted, nor is their CPU.
        cpu_before: dict[int, float] = {}
        result = ctx.load.run(job, functools.partial(_read_cpu, cpu_before, ctx.server.pid))
        server_cpu = _cpu_used(cpu_before, ctx.server.pid)
        stored = _stored_calls(ctx.server_database_url, ctx.run_id, endpoint)
        # Only a server the bench started runs the pass for sure (--url may point at one without).
        catch_up = _token_pass_catch_up(ctx.server_database_url) if ctx.server.pid else None
        # The workers' CPU until the pass had counted the run's calls: the whole cost of a call.
        with_pass = _cpu_used(cpu_before, ctx.server.pid) if catch_up is not None else []
        values: dict[str, Any] = {
            "calls_per_second": round(result.calls_per_second, 1),
            "requests_per_second": round(result.requests_per_second, 1),
            "p50_ms": round(result.percentile_ms(50), 2),
            "p95_ms": round(result.percentile_ms(95), 2),
            "p99_ms": round(result.percentile_ms(99), 2),
            "requests": result.requests,
            "calls": result.calls,
            "errors": result.errors,
            "retries": result.retries,
            "error_samples": result.error_samples,
            "seconds": round(result.wall_seconds, 2),
            "client_processes": result.processes,
            "client_cpu_per_process": round(result.client_cpu_share, 3),
        }
        if stored is not None:
            values["stored_calls"] = stored
        if catch_up is not None:
            values["token_pass_catch_up_seconds"] = round(catch_up, 2)
        if with_pass:
            values["server_us_per_call_with_token_pass"] = round(
                sum(with_pass) / max(result.calls, 1) * 1e6, 1
            )
        if server_cpu:
            # Figures per CPU-second of the server hold up on a busy machine; calls/s do not.
            busy = sum(server_cpu) / result.wall_seconds
            values["server_cores_busy"] = round(busy, 2)
            values["worker_cpu_split"] = [round(c / sum(server_cpu), 2) for c in server_cpu]
            values["calls_per_server_cpu_second"] = round(result.calls / sum(server_cpu), 1)
            values["server_us_per_call"] = round(sum(server_cpu) / max(result.calls, 1) * 1e6, 1)
        # The machine may be shared: its load during the run qualifies every figure above.
        values["load_average_1m"] = round(os.getloadavg()[0], 2)
        text = (
            f"{result.calls_per_second:>9,.0f} calls/s {result.requests_per_second:>7,.1f} req/s"
            f"   p50 {values['p50_ms']:.1f} ms  p95 {values['p95_ms']:.1f} ms"
            f"  p99 {values['p99_ms']:.1f} ms   errors {result.errors}"
            f" (retries {result.retries})"
            f"   ({result.calls:,} calls in {result.wall_seconds:.1f} s"
            f"; client CPU {result.client_cpu_share:.0%} of a core per process)"
        )
        if server_cpu:
            # The first share is the workers retired during the run (see _cpu_used).
            retired, *shares = values["worker_cpu_split"]
            split = "/".join(f"{share:.0%}" for share in shares)
            if retired:
                split += f", retired {retired:.0%}"
            text += (
                f"   server: {values['server_cores_busy']:.2f} cores busy (workers {split}),"
                f" {values['calls_per_server_cpu_second']:,.0f} calls per CPU-second"
                f" ({values['server_us_per_call']:.0f} µs per call)"
            )
        if catch_up is not None:
            text += f"   token pass done {catch_up:.1f} s after the run"
        if with_pass:
            us = values["server_us_per_call_with_token_pass"]
            text += f" ({us:.0f} µs server CPU per call with it)"
        text += f"   load average {values['load_average_1m']:.2f}"
        if "stored_calls" in values and values["stored_calls"] != result.calls:
            text += f"   STORED {values['stored_calls']:,} != SENT {result.calls:,}"
        figures.append(Figure("ingest", ctx.target, ENDPOINT_LABELS[endpoint], values, text))
        for sample in result.error_samples:
            ctx.say(f"    error: {sample}")
    return figures


def _requests_per_process(ctx: BenchContext) -> int | None:
    if ctx.calls is None:
        return None
    requests = -(-ctx.calls // CALLS_PER_REQUEST)
    processes = ctx.load.processes if ctx.load else 1
    return max(1, -(-requests // processes))


def _read_cpu(into: dict[int, float], master_pid: int | None) -> None:
    """Put each worker's CPU seconds so far into `into` (nothing without a server of ours)."""
    if master_pid:
        into.update(worker_cpu_seconds(master_pid))


def _cpu_used(before: dict[int, float], master_pid: int | None) -> list[float]:
    """CPU seconds each worker spent since `before` (workers that appeared since count fully),
    and first, what the workers that exited meanwhile spent since `before` (their whole time
    is now the master's reaped children's time, less what `before` had of it)."""
    if not master_pid or not before:
        return []
    after = worker_cpu_seconds(master_pid)
    exited = sum(t for pid, t in before.items() if pid not in after)
    retired = after.get(master_pid, 0.0) - before.get(master_pid, 0.0) - exited
    used = [retired] + [
        after[pid] - before.get(pid, 0.0) for pid in sorted(after) if pid != master_pid
    ]
    return used if sum(used) > 0 else []


# How long the bench waits for the servers' token pass to count what a run stored. During a
# burst the pass counts only rows older than TOKEN_PASS_MAX_LAG_SECONDS (30 s), so nearly all of
# an 8-second run is counted after it: 80,000 calls at the pass's ~2,500 rows/s on a busy
# machine is ~30 s, and twice that when other work takes the CPU.
TOKEN_PASS_WAIT_SECONDS = 120.0


def _token_pass_catch_up(database_url: str | None) -> float | None:
    """Seconds until the server's token pass has counted every stored call and message (None
    when the pass is off or there is no database to look at). The pass's CPU is in the server
    CPU figures of the next run only if it is still running then: waiting keeps each run's
    figures its own, and keeps it from competing with the raw inserts."""
    from ..settings import load

    if database_url is None or not load()["TOKEN_PASS_SECONDS"]:
        return None
    import sqlalchemy as sa

    from ..ingest.token_pass import MESSAGE_PENDING, PENDING
    from ..sql import MESSAGE, TOOL

    calls = sa.select(sa.func.count()).select_from(TOOL).where(PENDING).scalar_subquery()
    messages = sa.select(sa.func.count()).select_from(MESSAGE).where(MESSAGE_PENDING)
    query = sa.select(calls + messages.scalar_subquery())
    engine = sa.create_engine(database_url)
    started = time.monotonic()
    try:
        with engine.connect() as conn:
            while conn.execute(query).scalar_one():
                conn.rollback()
                if time.monotonic() - started > TOKEN_PASS_WAIT_SECONDS:
                    return None
                time.sleep(0.2)
    finally:
        engine.dispose()
    return time.monotonic() - started


def _stored_calls(database_url: str | None, run_id: str, endpoint: str) -> int | None:
    """Calls of this run's measured requests actually in the database (warm-up requests left
    out): the check that nothing acknowledged was lost."""
    if database_url is None:
        return None
    import sqlalchemy as sa

    from ..models import Message, ToolInvocation

    measured = Message.external_id.like(f"{run_id}-{endpoint}-w%") & ~Message.external_id.like(
        f"%{WARM_UP_MARK}%"
    )
    query = (
        sa.select(sa.func.count())
        .select_from(ToolInvocation)
        .join(Message, Message.id == ToolInvocation.message_id)
        .where(measured)
    )
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(query).scalar_one()
    finally:
        engine.dispose()
