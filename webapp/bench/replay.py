"""The replay figures: the pure core on synthetic histories, and the export API end to end.

* **core**: :func:`webapp.replay.replay` on ``make_synthetic_history`` conversations of 1,000,
  10,000 and 50,000 tool calls (10 calls per turn, so 100 to 5,000 turns), freshness off so
  every call goes through every rule. Run in this process, no database, no HTTP: what the
  design's "≤ 100 ms for 10,000 calls, growing linearly" is about. Median of repeated runs.
* **API**: the 10,000-call history stored in the server's database (SQLAlchemy Core bulk
  inserts: a few statements, no per-row ORM), then ``GET /api/v1/conversations/<cid>/replay``
  over one keep-alive connection, one request at a time: loading (five queries), the replay with
  the token counts stored at ingestion, validation, the naive-replay check and the JSON answer.
  p50/p95 latency of the measured requests after one warm-up request, twice: **cold**, one
  assistant message with one tool call appended before each request (a write: the conversation's
  revision moves, the answer is computed again, the worker's row memo reuses the unchanged
  rows), and **warm**, repeated (the worker's replay cache answers).

The stored rows carry chars/4 token counts (``token_method`` ``heuristic:chars/4``), which the
replay reads like tiktoken's: what matters here is that a count is stored, not its value.
"""

from __future__ import annotations

import functools
import http.client
import itertools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import create_engine, insert, select, update

from ..replay import History, ReplayOptions, make_synthetic_history, replay
from ..replay.gc_pause import gc_paused
from .load import percentile
from .sections import BenchContext, Figure, section
from .server import BENCH_PROJECT, worker_cpu_seconds

CORE_SIZES = (1_000, 10_000, 50_000)
CALLS_PER_TURN = 10
API_CALLS = 10_000
# Repetitions are bounded by time and count, so a short --seconds run stays short.
MAX_CORE_SECONDS = 3.0
MIN_CORE_RUNS = 3
MAX_CORE_RUNS = 50
MIN_API_REQUESTS = 5
MAX_API_REQUESTS = 500


@section(
    "replay",
    "Replay: the pure core on 1k/10k/50k-call histories, and GET .../replay of a stored "
    "10,000-call conversation",
    needs_server=True,
)
def replay_section(ctx: BenchContext) -> list[Figure]:
    figures = core_figures(ctx)
    if ctx.server is None or ctx.server_database_url is None:
        ctx.say("  replay API: skipped (needs the server's database; not with --url)")
        return figures
    figures.extend(api_figures(ctx))
    return figures


# --- The pure core ----------------------------------------------------------------------------


def time_core(history: History, options: ReplayOptions, seconds: float) -> list[float]:
    """Milliseconds of each run, repeated for about ``seconds`` (within the run bounds). Each run
    pauses the cyclic GC around itself, as a replay request does."""
    with gc_paused():
        replay(history, options)  # warm-up: first-use costs are not the replay's
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < MIN_CORE_RUNS or (
        time.perf_counter() < deadline and len(times) < MAX_CORE_RUNS
    ):
        started = time.perf_counter()
        with gc_paused():
            replay(history, options)
        times.append((time.perf_counter() - started) * 1000)
    return times


def core_figures(ctx: BenchContext) -> list[Figure]:
    options = ReplayOptions(freshness_seconds=None)
    seconds = min(ctx.seconds, MAX_CORE_SECONDS) / len(CORE_SIZES)
    figures = []
    per_call_1k = None
    for calls in CORE_SIZES:
        ctx.say(f"  replay core, {calls:,} calls ...")
        history = make_synthetic_history(calls // CALLS_PER_TURN, CALLS_PER_TURN, seed=0)
        times = time_core(history, options, seconds)
        median = statistics.median(times)
        per_call_us = median * 1000 / calls
        per_call_1k = per_call_1k or per_call_us
        values = {
            "calls": calls,
            "turns": calls // CALLS_PER_TURN,
            "median_ms": round(median, 2),
            "min_ms": round(min(times), 2),
            "runs": len(times),
            "us_per_call": round(per_call_us, 2),
        }
        text = (
            f"{median:>9.1f} ms median  (min {min(times):.1f} ms, {len(times)} runs)"
            f"   {per_call_us:.2f} µs/call, {per_call_us / per_call_1k:.2f} times the 1k rate"
        )
        label = f"replay core, {calls:,} calls ({calls // CALLS_PER_TURN:,} turns)"
        figures.append(Figure("replay", ctx.target, label, values, text))
    return figures


# --- Through the API ----------------------------------------------------------------------------


def api_figures(ctx: BenchContext) -> list[Figure]:
    """The same GET measured twice: cold (a call is appended before each request, as a write
    would, so each answer is computed again) and warm (repeated: the worker's replay cache
    answers, see webapp.services.replay_cache)."""
    assert ctx.server is not None and ctx.server_database_url is not None
    cid = f"{ctx.run_id}-replay"
    ctx.say(f"  replay API: storing a {API_CALLS:,}-call conversation ...")
    history = make_synthetic_history(API_CALLS // CALLS_PER_TURN, CALLS_PER_TURN, seed=0)
    store_history(ctx.server_database_url, history, cid)
    figures = []
    # The server's background work may hold SQLite's write lock for a while on a loaded
    # machine; the bench's own writes happen outside the timings and may wait for it.
    connect_args = {"timeout": 30} if ctx.server_database_url.startswith("sqlite") else {}
    engine = create_engine(ctx.server_database_url, connect_args=connect_args)
    try:
        append = functools.partial(_append_call, engine, cid, itertools.count())
        for label, before in (("cold", append), ("warm", None)):
            ctx.say(f"  replay API ({label}): GET /api/v1/conversations/{{cid}}/replay ...")
            measured = get_replays(ctx, cid, before=before)
            figures.append(_api_figure(ctx, label, *measured))
    finally:
        engine.dispose()
    return figures


def _append_call(engine: Any, cid: str, numbers: Iterator[int]) -> None:
    """What a write does before a cold request (outside the timing): one more assistant
    message with one counted tool call, and the conversation's revision and ``updated_at``
    bumped in the same transaction, as the write paths do. The answer is computed again; the
    worker's row memo makes the new call's row and reuses the 10,000 others."""
    from ..db import utcnow
    from ..sql import CONVERSATION, MESSAGE, TOOL

    n, now = next(numbers), utcnow()
    with engine.begin() as conn:
        conversation_id, project_id = conn.execute(
            select(CONVERSATION.c.id, CONVERSATION.c.project_id).where(
                CONVERSATION.c.external_id == cid
            )
        ).one()
        message_id = conn.execute(
            insert(MESSAGE).returning(MESSAGE.c.id),
            {
                "project_id": project_id,
                "external_id": f"{cid}-appended-{n}",
                "conversation_id": conversation_id,
                "role": "assistant",
                "content": f"Appended answer {n}.",
                "created_at": now,
                "status": "completed",
                "model": None,  # as the synthetic history's messages
                "content_tokens": 5,
            },
        ).scalar_one()
        response = f"appended result {n}"
        conn.execute(
            insert(TOOL),
            {
                "project_id": project_id,
                "message_id": message_id,
                "round_index": 0,
                "sequence_index": 0,
                "external_tool_call_id": f"appended_{n}",
                "function_name": "search",
                "arguments": {"q": f"appended {n}"},
                "created_at": now,
                "response": response,
                "response_created_at": now,
                "is_error": False,
                "arguments_tokens": 5,
                "response_tokens": _tokens(response),
                "token_method": "heuristic:chars/4",
                "response_bytes": len(response),
            },
        )
        conn.execute(
            update(CONVERSATION)
            .where(CONVERSATION.c.id == conversation_id)
            .values(revision=CONVERSATION.c.revision + 1, updated_at=now)
        )


def _api_figure(
    ctx: BenchContext,
    label: str, latencies: list[float], errors: int, size: int, cpu_seconds: float | None
) -> Figure:
    ordered = sorted(latencies)
    p50, p95 = percentile(ordered, 50), percentile(ordered, 95)
    values: dict[str, Any] = {
        "calls": API_CALLS,
        "requests": len(latencies),
        "p50_ms": round(p50, 1),
        "p95_ms": round(p95, 1),
        "errors": errors,
        "response_bytes": size,
        "load_average": _load_average(),
    }
    cpu = ""
    if cpu_seconds is not None:
        # Less noisy than latency on a shared machine: what the server spent per answer.
        values["server_cpu_ms_per_request"] = round(cpu_seconds * 1000 / len(latencies), 1)
        cpu = f"   server CPU {values['server_cpu_ms_per_request']:.1f} ms/request"
    text_ = (
        f"{p50:>9.1f} ms p50   p95 {p95:.1f} ms   {len(latencies)} requests, errors {errors}"
        f"   ({size / 1e6:.1f} MB per answer){cpu}   load average {values['load_average']}"
    )
    what = {
        "cold": "cold (each after a write: computed)",
        "warm": "warm (repeated: the replay cache)",
    }[label]
    name = f"GET /api/v1/conversations/{{cid}}/replay, {API_CALLS:,} calls, {what}"
    return Figure("replay", ctx.target, name, values, text_)


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover - not on Linux
        return None


def get_replays(
    ctx: BenchContext, cid: str, *, before: Callable[[], None] | None = None
) -> tuple[list[float], int, int, float | None]:
    """Latencies (ms) of the measured GETs, the number of failed ones, the answer's size and
    the CPU seconds the server's workers used for the measured GETs (None: unknown).
    ``before``: run before each measured GET, outside its time (its own CPU is in this
    process, not the server's)."""
    assert ctx.server is not None
    pid = ctx.server.pid
    url = urlsplit(ctx.server.base_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=120)
    path = f"/api/v1/conversations/{cid}/replay?freshness=off"
    headers = {"Authorization": f"Bearer {ctx.server.key}"}

    def get() -> tuple[int, bytes]:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    try:
        status, body = get()  # warm-up: the worker loads what it loads on first use
        latencies: list[float] = []
        errors = 0 if status == 200 else 1
        cpu_before = sum(worker_cpu_seconds(pid).values()) if pid else None
        deadline = time.perf_counter() + ctx.seconds
        while len(latencies) < MIN_API_REQUESTS or (
            time.perf_counter() < deadline and len(latencies) < MAX_API_REQUESTS
        ):
            if before is not None:
                before()
            started = time.perf_counter()
            status, _ = get()
            latencies.append((time.perf_counter() - started) * 1000)
            errors += status != 200
        cpu = None
        if cpu_before is not None and pid:
            cpu = sum(worker_cpu_seconds(pid).values()) - cpu_before
        return latencies, errors, len(body), cpu
    finally:
        conn.close()


def store_history(database_url: str, history: History, external_id: str) -> None:
    """``history`` as rows of the bench project, in a handful of bulk statements."""
    from .. import create_app
    from ..db import begin_write, db

    app = create_app(
        {"DATABASE_URL": database_url, "SECRET_KEY": "bench", "SQLITE_BUSY_TIMEOUT_MS": 30_000}
    )
    with app.app_context():
        try:
            # The write lock first (BEGIN IMMEDIATE on SQLite): the server's token pass is still
            # writing what the earlier sections sent, and a read transaction that tries to write
            # after one of its commits fails at once with "database is locked" (no busy wait).
            begin_write()
            _insert_rows(db, history, external_id)
            db.session.commit()
        finally:
            db.session.remove()
            db.engine.dispose()


def _tokens(text: str | None) -> int | None:
    return None if text is None else (len(text) + 3) // 4


def _insert_rows(db: Any, history: History, external_id: str) -> None:
    from sqlalchemy import insert

    from ..auth import get_or_create_project
    from ..db import utcnow
    from ..models import Conversation, Message, ServiceCall, ToolDefinition, ToolInvocation
    from ..replay.jsonfast import dumps

    project_id = get_or_create_project(BENCH_PROJECT).id
    # The synthetic conversation happened long ago; move it to end now, as a live one would.
    shift = utcnow() - max(m.created_at for m in history.messages) - timedelta(seconds=1)
    conversation_id = db.session.scalars(
        insert(Conversation).returning(Conversation.id),
        [
            {
                "project_id": project_id,
                "external_id": external_id,
                "title": f"Replay benchmark: {API_CALLS:,} calls",
                "system_prompt": history.system_prompt,
                "meta": {},
                "created_at": history.messages[0].created_at + shift,
                "updated_at": history.messages[-1].created_at + shift,
            }
        ],
    ).one()
    db.session.execute(
        insert(ToolDefinition),
        [
            {
                "conversation_id": conversation_id,
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in history.tool_definitions
        ],
    )
    message_ids = db.session.scalars(
        insert(Message).returning(Message.id, sort_by_parameter_order=True),
        [
            {
                "project_id": project_id,
                "external_id": f"{external_id}-{m.external_id}",
                "conversation_id": conversation_id,
                "role": m.role,
                "content": m.content,
                "created_at": m.created_at + shift,
                "status": m.status,
                "model": m.model,
                "content_tokens": _tokens(m.content),
            }
            for m in history.messages
        ],
    ).all()
    calls, usage = [], []
    for m, message_id in zip(history.messages, message_ids, strict=True):
        for c in m.tool_calls:
            calls.append(
                {
                    "project_id": project_id,
                    "message_id": message_id,
                    "round_index": c.round_index,
                    "sequence_index": c.sequence_index,
                    "external_tool_call_id": c.external_id,
                    "function_name": c.function_name,
                    "arguments": c.arguments,
                    "created_at": c.created_at + shift,
                    "response": c.response,
                    "response_created_at": c.response_created_at + shift
                    if c.response_created_at
                    else None,
                    "is_error": c.is_error,
                    "arguments_tokens": _tokens(dumps(c.arguments)) if c.arguments else None,
                    "response_tokens": _tokens(c.response),
                    "token_method": "heuristic:chars/4",
                    "response_bytes": len(c.response.encode()) if c.response is not None else None,
                }
            )
        for s in m.service_calls:
            usage.append(
                {
                    "message_id": message_id,
                    "round_index": s.round_index,
                    "model": s.model,
                    "input_tokens": s.input_tokens,
                    "output_tokens": s.output_tokens,
                    "cached_tokens": s.cached_tokens,
                    "created_at": s.created_at + shift if s.created_at else None,
                }
            )
    db.session.execute(insert(ToolInvocation), calls)
    db.session.execute(insert(ServiceCall), usage)
