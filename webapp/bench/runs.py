"""`runs`: Toolscope's own overhead per run, and a study over many conversations (issue 25,
'Measure').

A loopback fake model (:class:`FakeModel`, OpenAI Chat Completions, standard library only)
answers every request at once with one `lookup_order` call and its usage, and counts what it
got. Against it, through the real `openai` SDK and the app's own run worker:

* **per run**: a conversation of 200 tool calls (imported through the API), then 30 runs
  posted one after the other (``POST /api/v1/conversations/{cid}/runs``,
  ``fresh=true`` so none is answered from the cache) while a run worker of one thread works
  the queue in this process (as ``toolscope serve`` does); a run's overhead is its
  ``finished_at - created_at`` (both stamped by the server: the POST's start to the stored
  answer), p50/p95 in ms, the fake's own time included (it answers at once); beside it the
  POST's own time, created to claimed, the SDK's call (the run's ``latency_ms``) and this
  process's CPU per run (the POST, the worker and the fake together: steadier than the wall
  time on a loaded machine);
* **study**: 1,000 conversations (two turns each) and a
  study of two replay policies over them (``POST /api/v1/studies``, concurrency 8) worked by a
  run worker of 8 threads: the time from the POST to the study's end (the POST's own time
  apart: it stores the study, the worker prepares its runs), and the runs counted: every run
  succeeded, none started twice (``attempts`` is 1 for each), and the fake got exactly one
  request per run (none lost, none executed twice); and the conversation list's and a
  conversation page's times (p50/p95), read one after the other before the study and while it
  runs.

SQLite by default (``--only runs``), on the run's scratch database.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .sections import BenchContext, Figure, section

CALLS = 200
CALLS_PER_ROUND = 10
RUNS = 30
STUDY_CONVERSATIONS = 1_000
STUDY_CONCURRENCY = 8
TARGET_P50_MS = 50.0
TARGET_STUDY_SECONDS = 60.0
STUDY_TIMEOUT_SECONDS = 600.0
# The worker's idle poll (the default, 0.5 s): a POST wakes a worker of its own process at once, and
# under gunicorn the token pass process's through the doorbell (webapp/doorbell.py).
POLL_SECONDS = 0.5


class FakeModel:
    """OpenAI Chat Completions on 127.0.0.1: every answer at once, one tool call; counts the
    requests and the most at once."""

    def __init__(self) -> None:
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                with fake._lock:
                    fake.requests += 1
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    raw = self.rfile.read(length)
                    body = json.dumps(_answer(len(raw), fake.requests)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                finally:
                    with fake._lock:
                        fake.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    def __enter__(self) -> FakeModel:
        self.thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _answer(size: int, n: int) -> dict[str, Any]:
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'},
    }
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": None, "tool_calls": [call]},
            }
        ],
        "usage": {"prompt_tokens": size // 4, "completion_tokens": 12, "total_tokens": 0},
    }


def _turn(user: str, calls: int, tag: str) -> list[dict[str, Any]]:
    """A user message, rounds of CALLS_PER_ROUND tool calls with their results, an answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for start in range(0, calls, CALLS_PER_ROUND):
        ids = [f"{tag}_{i}" for i in range(start, min(calls, start + CALLS_PER_ROUND))]
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": f'{{"n": "{cid}"}}'},
                    }
                    for cid in ids
                ],
            }
        )
        messages.extend(
            {"role": "tool", "tool_call_id": cid, "content": f"order {cid}: shipped " * 8}
            for cid in ids
        )
    messages.append({"role": "assistant", "content": "Your order has shipped."})
    return messages


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


@section(
    "runs",
    "Runs: overhead per run (POST to succeeded) on a 200-call conversation, and a study over "
    "1,000 conversations at concurrency 8 (runs counted); runs only with --only runs",
    needs_database=True,
    by_default=False,
)
def runs_section(ctx: BenchContext) -> list[Figure]:
    assert ctx.database_url is not None
    from .. import create_app

    config = {
        "DATABASE_URL": ctx.database_url,
        "SECRET_KEY": "bench",
        "RUN_WORKERS": 0,
        "MODEL_MAX_RETRIES": 0,
        "MODEL_TIMEOUT_SECONDS": 30.0,
    }
    app = create_app(config)
    runs, conversations = RUNS, STUDY_CONVERSATIONS
    with FakeModel() as fake:
        return [
            _per_run(ctx, app, fake, runs),
            _study(ctx, app, fake, conversations),
        ]


def _setup(ctx: BenchContext, app: Any, fake: FakeModel, suffix: str) -> tuple[Any, dict]:
    from ..auth import create_key, get_or_create_project
    from ..db import db
    from ..ingest.transaction import Write, run_write
    from ..services.model_connections import (
        ConnectionDraft,
        prepare_connection,
        store_connection,
    )

    with app.app_context():
        project = get_or_create_project(f"{ctx.run_id}-runs-{suffix}")
        _, key = create_key(project, "bench")
        project_id = project.id
        db.session.commit()
        draft = ConnectionDraft(
            name="fake",
            kind="openai",
            base_url=fake.url,
            default_model="bench-model",
            api_key="bench-key",
        )
        values = prepare_connection(draft)
        run_write(Write(store_connection, (project_id, values)))
        db.session.remove()
    return app.test_client(), {"Authorization": f"Bearer {key}"}


def _import(client: Any, headers: dict, cid: str, messages: list[dict[str, Any]]) -> None:
    body = {"format": "openai-chat", "messages": messages}
    response = client.post(f"/api/v1/conversations/{cid}/import", json=body, headers=headers)
    if response.status_code != 201:
        raise RuntimeError(f"import of {cid}: {response.status_code} {response.get_data()[:300]}")


def _per_run(ctx: BenchContext, app: Any, fake: FakeModel, runs: int) -> Figure:
    from ..db import db
    from ..models import ModelRun
    from ..services.run_worker import RunWorker

    client, headers = _setup(ctx, app, fake, "one")
    _import(client, headers, "bench-200", _turn("Where are my orders?", CALLS, "c"))
    worker = RunWorker(threads=1, poll_seconds=POLL_SECONDS)
    worker.start(app)  # woken by the POST, as in `toolscope serve`
    overheads: list[float] = []
    queued: list[float] = []  # created_at to started_at: the POST, the wake-up, the claim
    posts: list[float] = []  # the POST's own time, as its client sees it
    sends: list[float] = []  # the run's latency_ms: the SDK's call, the fake's answer included
    cpu = 0.0
    try:
        for n in range(runs + 2):  # the first two warm the worker up
            executed = worker.executed
            cpu_begun, begun = time.process_time(), time.perf_counter()
            body = {"connection": "fake", "fresh": True}
            response = client.post(
                "/api/v1/conversations/bench-200/runs", json=body, headers=headers
            )
            posted = time.perf_counter() - begun
            if response.status_code != 202:
                raise RuntimeError(f"run POST: {response.status_code} {response.get_data()[:300]}")
            run_id = response.get_json()["id"]
            # Wait on the worker's own count, not on the database: the bench's reads would
            # take the CPU and the SQLite file from the run they time.
            deadline = time.monotonic() + 30
            while worker.executed == executed and time.monotonic() < deadline:
                time.sleep(0.001)
            if n >= 2:
                cpu += time.process_time() - cpu_begun
            with app.app_context():
                row = db.session.get(ModelRun, run_id)
                status, created = row.status, row.created_at
                started, finished = row.started_at, row.finished_at
                latency = row.latency_ms
                db.session.remove()
            if status != "succeeded":
                raise RuntimeError(f"run {run_id} {status}")
            if n >= 2:
                overheads.append((finished - created).total_seconds() * 1000)
                queued.append((started - created).total_seconds() * 1000)
                posts.append(posted * 1000)
                sends.append(float(latency))
    finally:
        worker.stop()
    p50, p95 = statistics.median(overheads), _p(overheads, 0.95)
    cpu_ms = cpu / len(overheads) * 1000
    ok = "ok" if p50 <= TARGET_P50_MS else f"over the {TARGET_P50_MS:.0f} ms target"
    text = (
        f"p50 {p50:.1f} ms, p95 {p95:.1f} ms over {len(overheads)} runs ({ok}); of which the "
        f"POST p50 {statistics.median(posts):.1f} ms, queued to claimed p50 "
        f"{statistics.median(queued):.1f} ms, the SDK's call p50 {statistics.median(sends):.1f} "
        f"ms; CPU of this process per run {cpu_ms:.1f} ms"
    )
    ctx.say(f"  per run, {CALLS}-call conversation: {text}")
    values = {
        "runs": len(overheads),
        "calls": CALLS,
        "p50_ms": round(p50, 2),
        "p95_ms": round(p95, 2),
        "post_p50_ms": round(statistics.median(posts), 2),
        "created_to_started_p50_ms": round(statistics.median(queued), 2),
        "sdk_call_p50_ms": round(statistics.median(sends), 2),
        "cpu_per_run_ms": round(cpu_ms, 2),
        "target_p50_ms": TARGET_P50_MS,
    }
    return Figure(
        "runs", ctx.target, f"run overhead, POST to succeeded, {CALLS} calls", values, text
    )


def _study(ctx: BenchContext, app: Any, fake: FakeModel, conversations: int) -> Figure:
    from sqlalchemy import func, select

    from ..db import db
    from ..models import ModelRun
    from ..services.run_worker import RunWorker

    client, headers = _setup(ctx, app, fake, "study")
    ctx.say(f"  importing {conversations:,} conversations ...")
    cids = [f"study-{n}" for n in range(conversations)]
    for n, cid in enumerate(cids):
        messages = _turn(f"Where is order A{n}?", 2, "a") + _turn("Is it there yet?", 2, "b")
        _import(client, headers, cid, messages)
    before = fake.requests
    pages = _Pages(app, cids[0], f"{ctx.run_id}-runs-study")
    idle = pages.sample(PAGE_SAMPLES)  # the pages' usual times, before the study
    worker = RunWorker(threads=STUDY_CONCURRENCY, poll_seconds=0.2)
    worker.start(app)
    try:
        begun, cpu_begun = time.perf_counter(), time.process_time()
        body = {
            "connection": "fake",
            "conversations": cids,
            "variants": {"a": {"as_of": "turn:2"}, "b": {"as_of": "turn:2", "freshness": "off"}},
            "concurrency": STUDY_CONCURRENCY,
        }
        response = client.post("/api/v1/studies", json=body, headers=headers)
        if response.status_code != 202:
            raise RuntimeError(f"study POST: {response.status_code} {response.get_data()[:300]}")
        posted = time.perf_counter() - begun
        study_id = response.get_json()["id"]
        pages.start()  # the pages read while the study runs
        deadline = time.monotonic() + STUDY_TIMEOUT_SECONDS
        while True:
            study = client.get(f"/api/v1/studies/{study_id}", headers=headers).get_json()
            if study["status"] not in ("preparing", "running"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"study still running after {STUDY_TIMEOUT_SECONDS:.0f} s")
            time.sleep(0.1)
        seconds = time.perf_counter() - begun
        cpu = time.process_time() - cpu_begun
    finally:
        busy = pages.stop()
        worker.stop()
    with app.app_context():
        stmt = (
            select(ModelRun.status, func.count(), func.max(ModelRun.attempts))
            .where(ModelRun.study_id == study_id)
            .group_by(ModelRun.status)
        )
        by_status = {s: (n, most) for s, n, most in db.session.execute(stmt)}
        db.session.remove()
    total = sum(n for n, _ in by_status.values())
    succeeded = by_status.get("succeeded", (0, 0))[0]
    most_attempts = max((most for _, most in by_status.values()), default=0)
    sent = fake.requests - before
    counted = total == succeeded == sent == 2 * conversations and most_attempts == 1
    ok = (
        "ok" if seconds <= TARGET_STUDY_SECONDS else f"over the {TARGET_STUDY_SECONDS:.0f} s target"
    )
    text = (
        f"{conversations:,} conversations, {total:,} runs in {seconds:.1f} s ({ok}; the POST "
        f"with its estimate {posted:.1f} s; CPU of this process {cpu:.1f} s, of which the page "
        f"reads {pages.cpu:.1f} s: {1000 * (cpu - pages.cpu) / max(total, 1):.1f} ms a run); "
        f"{succeeded:,} succeeded, {sent:,} requests to the "
        f"model, at most {fake.max_in_flight} at once, no run started twice: "
        f"{'yes' if counted else 'NO'}; pages p50/p95 before → during: "
        + "; ".join(f"{name} {_ms(idle[name])} → {_ms(busy[name])}" for name in sorted(idle))
    )
    ctx.say(f"  study: {text}")
    values = {
        "conversations": conversations,
        "runs": total,
        "succeeded": succeeded,
        "requests": sent,
        "max_attempts": most_attempts,
        "max_in_flight": fake.max_in_flight,
        "seconds": round(seconds, 2),
        "post_seconds": round(posted, 2),
        "cpu_seconds": round(cpu, 2),
        "pages_cpu_seconds": round(pages.cpu, 2),
        "agree": study["report"]["agree"] if study.get("report") else None,
        "none_lost_or_twice": counted,
        "pages_ms": {
            name: {
                "before_p50": round(statistics.median(idle[name]), 1),
                "before_p95": round(_p(idle[name], 0.95), 1),
                "during_p50": round(statistics.median(busy[name]), 1) if busy[name] else None,
                "during_p95": round(_p(busy[name], 0.95), 1) if busy[name] else None,
                "during_n": len(busy[name]),
            }
            for name in sorted(idle)
        },
        "target_seconds": TARGET_STUDY_SECONDS,
    }
    return Figure(
        "runs",
        ctx.target,
        f"study, {conversations:,} conversations, concurrency {STUDY_CONCURRENCY}",
        values,
        text,
    )


PAGE_SAMPLES = 20
# Between two rounds of page reads while the study runs (a user reading, not a load test).
PAGE_PAUSE_SECONDS = 0.5


def _ms(values: list[float]) -> str:
    if not values:
        return "none"
    return f"{statistics.median(values):.0f}/{_p(values, 0.95):.0f} ms"


class _Pages:
    """The dashboard's conversation list and one conversation page, read one after the other
    by a thread of this process (as a user clicking about) while the study runs, each read
    timed: through the app's test client (DEV, no login from loopback), on the same
    database, in the same process as the run worker's threads (so the GIL is shared too)."""

    def __init__(self, app: Any, cid: str, project: str) -> None:
        from sqlalchemy import select

        from .. import create_app
        from ..db import db
        from ..models import Conversation

        config = dict(app.config)
        with app.app_context():
            row_id = db.session.scalar(
                select(Conversation.id).where(Conversation.external_id == cid)
            )
            db.session.remove()
        self.client = create_app(
            {
                "DATABASE_URL": config["DATABASE_URL"],
                "SECRET_KEY": "bench",
                "RUN_WORKERS": 0,
                "DEV": True,
                "DEFAULT_PROJECT": project,  # the study's project, without a switch
            }
        ).test_client()
        self.urls = {
            "conversation list": "/conversations",
            "conversation page": f"/conversations/{row_id}",
        }
        self.times: dict[str, list[float]] = {name: [] for name in self.urls}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.cpu = 0.0  # the page reads' own CPU (this thread's), apart from the study's

    def _get(self, name: str) -> float:
        begun = time.perf_counter()
        response = self.client.get(self.urls[name])
        took = (time.perf_counter() - begun) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{self.urls[name]}: {response.status_code}")
        return took

    def sample(self, n: int) -> dict[str, list[float]]:
        for name in self.urls:
            self._get(name)  # warm
        return {name: [self._get(name) for _ in range(n)] for name in self.urls}

    def _loop(self) -> None:
        begun = time.thread_time()
        while not self._stop.is_set():
            for name in self.urls:
                self.times[name].append(self._get(name))
            self._stop.wait(PAGE_PAUSE_SECONDS)
        self.cpu = time.thread_time() - begun

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, list[float]]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        return self.times
