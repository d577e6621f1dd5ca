"""The load generator: client processes posting batches of tool calls over keep-alive HTTP.

Processes, not threads: the generator must not be the bottleneck, and one Python process cannot
both build requests and parse answers fast enough on its own. Each process keeps an
`http.client` connection alive (cheaper per request than `requests`; reopened every
RECONNECT_EVERY requests so connections spread over the server's workers) and builds its bodies by
splicing unique ids into pre-encoded JSON, so almost all of its time is spent waiting for the
server. Each process reports its own CPU time; the report shows it next to the figures, so a
saturated client is visible instead of silently capping the result.

This module uses the standard library only.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

CALLS_PER_REQUEST = 50
# How long workers wait for each other at the start line before the run is abandoned.
START_TIMEOUT_SECONDS = 60.0
# A gthread worker keeps the keep-alive connections it accepted; with a handful of client
# processes they can all land on one worker and leave the other idle, which a crowd of agents
# would not do. Reconnecting now and then lets the connections spread over the workers.
RECONNECT_EVERY = 25
# In the ids of warm-up requests, so that the stored-calls check can leave them out.
WARM_UP_MARK = "-warm-up"
# Kept per process to explain failures; the count of errors is always complete.
ERROR_SAMPLES = 3
# Every RESEND_EVERY-th batch is sent a second time after its answer, as a client does whose
# answer was lost: the stored-calls check then also shows that a retry stores nothing twice.
RESEND_EVERY = 10
# A 503 (busy) or a dropped connection is retried with the same body, as the clients do.
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Job:
    """What every load process does during one measured run."""

    endpoint: str  # a key of BODY_BUILDERS
    base_url: str
    key: str
    seconds: float
    requests_per_process: int | None  # None: run for `seconds`
    run_id: str
    warm_up_seconds: float = 1.0


@dataclass
class WorkerResult:
    requests: int = 0
    calls: int = 0
    errors: int = 0
    retries: int = 0  # requests sent again: resends of answered batches and retries after 503
    error_samples: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    cpu_seconds: float = 0.0


@dataclass
class LoadResult:
    """All processes of one run, merged."""

    endpoint: str
    processes: int
    requests: int
    calls: int
    errors: int
    retries: int
    error_samples: list[str]
    latencies: list[float]
    wall_seconds: float
    cpu_seconds: float

    @property
    def calls_per_second(self) -> float:
        return self.calls / self.wall_seconds if self.wall_seconds else 0.0

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.wall_seconds if self.wall_seconds else 0.0

    def percentile_ms(self, p: float) -> float:
        return percentile(self.latencies, p) * 1000

    @property
    def client_cpu_share(self) -> float:
        """CPU used per load process, as a share of one core (1.0 = that process was saturated)."""
        if not self.wall_seconds or not self.processes:
            return 0.0
        return self.cpu_seconds / self.wall_seconds / self.processes

    @classmethod
    def merge(cls, endpoint: str, results: list[WorkerResult]) -> LoadResult:
        latencies = sorted(x for r in results for x in r.latencies)
        wall = max(r.ended for r in results) - min(r.started for r in results)
        return cls(
            endpoint=endpoint,
            processes=len(results),
            requests=sum(r.requests for r in results),
            calls=sum(r.calls for r in results),
            errors=sum(r.errors for r in results),
            retries=sum(r.retries for r in results),
            error_samples=[s for r in results for s in r.error_samples][:ERROR_SAMPLES],
            latencies=latencies,
            wall_seconds=wall,
            cpu_seconds=sum(r.cpu_seconds for r in results),
        )


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    rank = max(1, round(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# -- request bodies ---------------------------------------------------------------------------

# A realistic search result: ~400 bytes of JSON per call, like the demo's sources.
_RESULT = json.dumps(
    [
        {
            "source_number": n,
            "title": f"Quarterly report {n}",
            "url": f"https://example.com/reports/{n}",
            "snippet": "Revenue grew 12% year over year, driven by the enterprise segment.",
        }
        for n in (1, 2)
    ]
)


def _tool_items() -> bytes:
    """50 MessageTool items: 5 rounds of 10 parallel calls, all with a response."""
    items = [
        {
            "externalToolCallId": f"call_{i}",
            "functionName": "internal_search" if i % 2 else "fetch_page",
            "arguments": {"query": f"quarterly revenue {i}", "limit": 5},
            "roundIndex": i // 10,
            "sequenceIndex": i % 10,
            "response": {"content": _RESULT},
        }
        for i in range(CALLS_PER_REQUEST)
    ]
    return json.dumps(items).encode()


def _turn_rounds() -> bytes:
    """The native /turns rounds: 5 service calls with usage, 10 parallel calls each."""
    rounds = [
        {
            "usage": {
                "model": "gpt-4o",
                "provider": "openai",
                "input_tokens": 1200 + r * 400,
                "output_tokens": 90,
                "cached_tokens": 1024,
            },
            "calls": [
                {
                    "id": f"call_{r}_{s}",
                    "name": "internal_search" if s % 2 else "fetch_page",
                    "arguments": {"query": f"quarterly revenue {r}.{s}", "limit": 5},
                    "response": {"content": _RESULT},
                }
                for s in range(CALLS_PER_REQUEST // 5)
            ],
        }
        for r in range(5)
    ]
    return json.dumps(rounds).encode()


BodyBuilder = Callable[[str, int], tuple[str, bytes]]


def _message_tools_builder() -> BodyBuilder:
    tools = _tool_items()

    def build(prefix: str, n: int) -> tuple[str, bytes]:
        body = b'{"messageId":"%s-m%d","tools":%s}' % (prefix.encode(), n, tools)
        return "/api/v1/messages/tools", body

    return build


def _turns_builder() -> BodyBuilder:
    rounds = _turn_rounds()

    def build(prefix: str, n: int) -> tuple[str, bytes]:
        # 100 turns per conversation: conversations grow as real ones do.
        path = f"/api/v1/conversations/{prefix}-c{n // 100}/turns"
        body = (
            b'{"user":{"id":"%s-u%d","role":"user","content":"What was the revenue?"},'
            b'"assistant":{"id":"%s-a%d","model":"gpt-4o",'
            b'"content":"Revenue grew 12%% [source1].","rounds":%s}}'
            % (prefix.encode(), n, prefix.encode(), n, rounds)
        )
        return path, body

    return build


BODY_BUILDERS: dict[str, Callable[[], BodyBuilder]] = {
    "messages-tools": _message_tools_builder,
    "turns": _turns_builder,
}
ENDPOINT_LABELS = {
    "messages-tools": "POST /api/v1/messages/tools",
    "turns": "POST /api/v1/conversations/{cid}/turns",
}


# -- one process --------------------------------------------------------------------------------


class _Connection:
    """A keep-alive HTTP connection that reconnects when the server closed it."""

    def __init__(self, base_url: str, key: str):
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Connection": "keep-alive",
        }
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        try:
            self.conn.request(method, path, body=body, headers=self.headers)
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()  # the next request opens a fresh connection
            raise

    def close(self) -> None:
        self.conn.close()


def run_job(job: Job, worker_number: int, start_line: Any) -> WorkerResult:
    """Warm up, wait for every process at the start line, then post until time or quota."""
    build = BODY_BUILDERS[job.endpoint]()
    prefix = f"{job.run_id}-{job.endpoint}-w{worker_number}"
    conn = _Connection(job.base_url, job.key)
    result = WorkerResult()
    try:
        _warm_up(conn, build, f"{prefix}{WARM_UP_MARK}", job.warm_up_seconds)
        start_line.wait(START_TIMEOUT_SECONDS)
        cpu_start = time.process_time()
        result.started = time.monotonic()
        deadline = result.started + job.seconds
        n = 0
        while True:
            if job.requests_per_process is not None:
                if n >= job.requests_per_process:
                    break
            elif time.monotonic() >= deadline:
                break
            if n and n % RECONNECT_EVERY == 0:
                conn.close()
            path, body = build(prefix, n)
            n += 1
            if _post(conn, path, body, result) and n % RESEND_EVERY == 0:
                result.retries += 1
                _post(conn, path, body, result, count=False)
        result.ended = time.monotonic()
        result.cpu_seconds = time.process_time() - cpu_start
    finally:
        conn.close()
    return result


def _post(
    conn: _Connection, path: str, body: bytes, result: WorkerResult, *, count: bool = True
) -> bool:
    """Post one batch until it is answered (a 503 or a dropped connection is retried with the
    same body); its calls are counted once, when `count`. True when it was stored."""
    sent = time.monotonic()
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            status, answer = conn.request("POST", path, body)
        except (OSError, http.client.HTTPException) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        else:
            if status in (200, 201):
                if count:
                    result.latencies.append(time.monotonic() - sent)
                    result.requests += 1
                    result.calls += CALLS_PER_REQUEST
                return True
            failure = f"HTTP {status}: {answer[:200].decode(errors='replace').strip()}"
            if status != 503:
                break
        if attempt < MAX_ATTEMPTS:
            result.retries += 1
            time.sleep(0.05 * attempt)
    if count:
        result.requests += 1
    _count_error(result, failure)
    return False


def _warm_up(conn: _Connection, build: BodyBuilder, prefix: str, seconds: float) -> None:
    """Requests outside the measurement: open the connection, and let every server worker load
    what it loads lazily on its first writes (tokenizer files, ...)."""
    deadline = time.monotonic() + seconds
    n = 0
    while n == 0 or time.monotonic() < deadline:
        path, body = build(prefix, n)
        conn.request("POST", path, body)
        n += 1


def _count_error(result: WorkerResult, sample: str) -> None:
    result.errors += 1
    if len(result.error_samples) < ERROR_SAMPLES:
        result.error_samples.append(sample)


def _worker_main(worker_number: int, jobs: Any, results: Any, start_line: Any) -> None:
    while True:
        job = jobs.get()
        if job is None:
            return
        try:
            results.put(run_job(job, worker_number, start_line))
        except Exception as exc:  # reported to the parent instead of dying silently
            start_line.abort()
            results.put(f"load process {worker_number} failed: {type(exc).__name__}: {exc}")


# -- the pool -----------------------------------------------------------------------------------


class LoadGenerator:
    """`processes` long-lived load processes, reused for every run of a bench invocation."""

    def __init__(self, processes: int):
        # spawn: a clean interpreter, whatever threads or connections the parent holds.
        context = multiprocessing.get_context("spawn")
        self.processes = processes
        self._jobs = context.Queue()
        self._results = context.Queue()
        # Every process plus the parent: the clock starts when all are connected and warm.
        self._start_line = context.Barrier(processes + 1)
        self._workers = [
            context.Process(
                target=_worker_main,
                args=(number, self._jobs, self._results, self._start_line),
                daemon=True,
            )
            for number in range(processes)
        ]
        for worker in self._workers:
            worker.start()

    def run(self, job: Job, on_start: Callable[[], object] | None = None) -> LoadResult:
        """Run `job` in every process; `on_start` is called when all of them have warmed up
        and the measured part begins (the server's CPU is read there, not before the warm-up)."""
        for _ in self._workers:
            self._jobs.put(job)
        try:
            self._start_line.wait(START_TIMEOUT_SECONDS)
        except threading.BrokenBarrierError:
            raise RuntimeError(self._first_failure()) from None
        if on_start is not None:
            on_start()
        limit = job.seconds if job.requests_per_process is None else 600.0
        collected: list[WorkerResult] = []
        for _ in self._workers:
            try:
                item = self._results.get(timeout=limit + START_TIMEOUT_SECONDS)
            except queue.Empty:
                raise RuntimeError("load processes did not report back in time") from None
            if isinstance(item, str):
                raise RuntimeError(item)
            collected.append(item)
        self._start_line.reset()
        return LoadResult.merge(job.endpoint, collected)

    def _first_failure(self) -> str:
        try:
            item = self._results.get(timeout=5)
        except queue.Empty:
            return "load processes did not reach the start line"
        return item if isinstance(item, str) else "a load process did not start"

    def close(self) -> None:
        for _ in self._workers:
            self._jobs.put(None)
        for worker in self._workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
