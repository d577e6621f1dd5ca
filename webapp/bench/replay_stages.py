"""Where a ``GET .../replay`` request's CPU goes, stage by stage, in this process.

``python -m webapp.bench.replay_stages sqlite:////tmp/replay-stages.db [runs]`` (or the URL of
an empty PostgreSQL database of your own, which it migrates) stores the
replay bench's 10,000-call conversation in that database (once: migrations, the bench project,
the rows), then runs the route's stages as the route does (GC paused, ``freshness=off``, a
fixed "now") and prints the median and lowest ``time.process_time`` of each stage over
``runs`` runs (9 by default), and the answer's SHA-256: the figures of docs/replay.md "Speed".
Each run finds the rows the previous one read in the worker's row memo, as a replay after a
write to the conversation does (``webapp.services.row_memo``); ``--fresh-rows`` makes every row
again.
``--profile`` prints a cProfile of one run instead; ``--cached`` the CPU of a request through
the replay cache instead, uncached (``REPLAY_CACHE_MB=0``: no row memo either), cold (computed
and kept, the rows from the memo) and warm
(answered from the cache); ``--cached --stale`` the same with the default options, where every
result is stale at that "now" (the cached answer has each age written in at each request).
"""

from __future__ import annotations

import cProfile
import hashlib
import os
import pstats
import statistics
import sys
import time
from datetime import datetime
from itertools import pairwise

from flask import Flask, g
from sqlalchemy import create_engine, inspect, select

from .. import create_app
from ..auth import get_or_create_project
from ..db import db
from ..models import Conversation
from ..queries.conversations import find_conversation
from ..queries.histories import load_history
from ..replay import make_synthetic_history
from ..replay.export import ReplayQuery
from ..replay.gc_pause import gc_paused
from ..services import replay_answer, replay_cache, row_memo
from .replay import API_CALLS, CALLS_PER_TURN, store_history
from .server import BENCH_PROJECT, prepare_database

CID = "replay-stages"
NOW = datetime.fromisoformat("2030-01-01T00:00:00+00:00")


def prepared_app(url: str) -> Flask:
    """The app on ``url`` (a SQLite file, or an empty PostgreSQL database of your own), with
    the bench conversation stored (once)."""
    if not inspect(create_engine(url)).has_table(Conversation.__tablename__):
        prepare_database(url)  # migrations and the bench project
    app = create_app({"DATABASE_URL": url, "SECRET_KEY": "bench"})
    with app.app_context():
        stored = db.session.scalar(select(Conversation.id).where(Conversation.external_id == CID))
        db.session.remove()
    if stored is None:
        history = make_synthetic_history(API_CALLS // CALLS_PER_TURN, CALLS_PER_TURN, seed=0)
        store_history(url, history, CID)
    return app


def run_once(app: Flask, stages: dict[str, list[float]] | None, *, reuse: bool = True) -> bytes:
    """One request's stages; their CPU milliseconds appended to ``stages``. ``reuse``: the
    worker's row memo holds the conversation's rows from the previous run, as after a write
    that added to the conversation (webapp.services.row_memo); False: every row made again."""
    from ..api.replay import json_response  # the route's own encoder

    marks: list[tuple[str, float]] = []

    def mark(name: str) -> None:
        marks.append((name, time.process_time()))

    with app.test_request_context("/"), gc_paused():
        g.project = get_or_create_project(BENCH_PROJECT)
        mark("start")
        conversation = find_conversation(g.project.id, external_id=CID)
        assert conversation is not None
        memo = row_memo.get_memo(app) if reuse else None
        loaded = load_history(conversation, memo=memo)
        mark("load")
        # The route's build: the core, then the checks told which arguments are objects.
        built = replay_answer.build(conversation, loaded, ReplayQuery(freshness="off"), NOW)
        mark("core")
        _ = built.validation
        mark("validation")
        _ = built.naive_problems
        mark("naive")
        text_messages = replay_answer.loaded_messages_text_only(built.options.format)
        response = json_response(built.document(), text_messages=text_messages)
        body = b"".join(response.response)  # type: ignore[arg-type]
        mark("encode")
        del built, loaded, response, conversation
        mark("free")
        db.session.remove()
    if stages is not None:
        for (_, before), (name, after) in pairwise(marks):
            stages.setdefault(name, []).append((after - before) * 1000)
        stages.setdefault("total", []).append((marks[-1][1] - marks[0][1]) * 1000)
    return body


def run_cached(app: Flask, *, cold: bool, query: ReplayQuery) -> tuple[float, bytes]:
    """One request's CPU milliseconds through the replay cache (``webapp.services.
    replay_answer``), from the conversation's record to the answer's bytes: cold (the cache
    emptied first: computed and kept) or warm (answered from the cache)."""
    cache = replay_cache.get_cache(app)
    if cold:
        cache.clear()
    with app.test_request_context("/"), gc_paused():
        g.project = get_or_create_project(BENCH_PROJECT)
        started = time.process_time()
        conversation = find_conversation(g.project.id, external_id=CID)
        assert conversation is not None
        chunks = replay_answer.answer(
            conversation,
            query,
            "json",
            replay_answer.encode_json,
            now=NOW,
        )
        spent = (time.process_time() - started) * 1000
        db.session.remove()
    return spent, b"".join(chunks)


def main_cached(app: Flask, runs: int, query: ReplayQuery) -> None:
    cache, memo = replay_cache.get_cache(app), row_memo.get_memo(app)
    assert memo is not None
    bound, cache.max_bytes, memo.max_bytes = cache.max_bytes, 0, 0
    uncached = [run_cached(app, cold=True, query=query)[0] for _ in range(runs)]
    cache.max_bytes = memo.max_bytes = bound
    _, cold_body = run_cached(app, cold=True, query=query)  # warm-up
    cold = [run_cached(app, cold=True, query=query)[0] for _ in range(runs)]
    warm = []
    for _ in range(runs):
        spent, body = run_cached(app, cold=False, query=query)
        assert body == cold_body
        warm.append(spent)
    print(f"load average {os.getloadavg()[0]:.2f}, {runs} runs, through the replay cache")
    for name, values in (("uncached", uncached), ("cold", cold), ("warm", warm)):
        print(f"  {name:<12} median {statistics.median(values):7.1f} ms   min {min(values):7.1f}")


def main(argv: list[str]) -> None:
    url = argv[0]
    runs = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 9
    app = prepared_app(url)
    body = run_once(app, None)  # warm-up: first-use costs are not the request's
    print(f"answer: {len(body):,} bytes, sha256 {hashlib.sha256(body).hexdigest()}")
    if "--profile" in argv:
        profile = cProfile.Profile()
        profile.runcall(run_once, app, None)
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        return
    if "--cached" in argv:
        stale = "--stale" in argv  # the default options: every result stale at NOW
        main_cached(app, runs, ReplayQuery() if stale else ReplayQuery(freshness="off"))
        return
    reuse = "--fresh-rows" not in argv
    stages: dict[str, list[float]] = {}
    for _ in range(runs):
        run_once(app, stages, reuse=reuse)
    rows = "rows reused from the previous run" if reuse else "every row made again"
    print(f"load average {os.getloadavg()[0]:.2f}, {runs} runs, {rows}")
    for name, values in stages.items():
        print(f"  {name:<12} median {statistics.median(values):7.1f} ms   min {min(values):7.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
