"""`calls-search`: the calls explorer's full-text search over many tool calls.

N calls (default 1,000,000 on SQLite, 200,000 on PostgreSQL; `--search-calls`) go straight into
the scratch database of the run through the DB-API driver, in a project of their own; the
database's own search index (FTS5 triggers, the GIN index) is kept as every write keeps it.
Then the first page of the explorer is read (the same `list_calls` the page and the API run)
for searches of different selectivity, and the median of several runs is reported in ms.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from .sections import BenchContext, Figure, section

DEFAULT_CALLS = {"sqlite": 1_000_000, "postgresql": 200_000}
BATCH = 20_000
RUNS = 7
TARGET_MS = 300.0
TOOLS = ("search_kb", "get_order", "fetch_invoice", "get_customer", "create_ticket", "weather")
FAILURE = "Error: upstream timeout after 30s from the billing gateway"
# One call in 2,000 fails with FAILURE; one in 100 mentions "timeout" in its result.
FAILURE_EVERY = 2_000
TIMEOUT_EVERY = 100
SEARCHES = (
    ("rare words, 0.05 % of calls", {"q": "upstream timeout"}),
    ("one word, 1 % of calls", {"q": "timeout"}),
    ("words + status=error", {"q": "upstream timeout", "status": "error"}),
    ("words + sort=size", {"q": "timeout", "sort": "size"}),
    ("a word of every call", {"q": "text"}),
)


def _vocabulary(rng: random.Random, size: int = 5_000) -> list[str]:
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ven", "dor", "qui", "zal"]
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _rows(project_id: int, message_id: int, n: int, start: int, count: int, vocab: list[str]):
    rng = random.Random(start)
    now = datetime.now(UTC) - timedelta(days=1)
    for i in range(start, min(start + count, n)):
        failed = i % FAILURE_EVERY == 7
        words = rng.choices(vocab, k=rng.randint(10, 40))
        if i % TIMEOUT_EVERY == 3:
            words.insert(rng.randrange(len(words)), "timeout")
        result = FAILURE if failed else json.dumps({"text": " ".join(words), "n": i})
        at = now + timedelta(milliseconds=i)
        stamp = at.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
        yield (
            project_id,
            message_id,
            i // 100,
            i % 100,
            f"call_{i}",
            TOOLS[i % len(TOOLS)],
            json.dumps({"query": " ".join(rng.choices(vocab, k=3)), "id": i}),
            stamp,
            stamp,
            (at + timedelta(milliseconds=rng.randint(5, 3000))).replace(tzinfo=None).strftime(
                "%Y-%m-%d %H:%M:%S.%f"
            ),
            result,
            stamp,
            failed,
            len(result.encode()),
            len(result) // 4,
        )


COLUMNS = (
    "project_id, message_id, round_index, sequence_index, external_tool_call_id, function_name, "
    "arguments, created_at, started_at, ended_at, response, response_created_at, is_error, "
    "response_bytes, response_tokens"
)


def _insert(engine: Any, project_id: int, message_id: int, n: int, say: Any) -> float:
    """Insert n calls through the driver; seconds taken."""
    dialect = engine.dialect.name
    mark = "?" if dialect == "sqlite" else "%s"
    # The arguments (7th) are JSON text: PostgreSQL's column is JSONB.
    marks = ", ".join(
        f"CAST({mark} AS JSONB)" if n == 6 and dialect == "postgresql" else mark for n in range(15)
    )
    sql = f"INSERT INTO tool_invocation ({COLUMNS}) VALUES ({marks})"
    vocab = _vocabulary(random.Random(11))
    started = time.perf_counter()
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for start in range(0, n, BATCH):
            if dialect == "sqlite":
                cursor.execute("BEGIN IMMEDIATE")
            cursor.executemany(sql, list(_rows(project_id, message_id, n, start, BATCH, vocab)))
            raw.commit()
            if start and start % 200_000 == 0:
                say(f"    {start:,} calls ...")
        if dialect == "postgresql":
            raw.commit()
            cursor.execute("ANALYZE tool_invocation")
            raw.commit()
    finally:
        raw.close()
    return time.perf_counter() - started


@section(
    "calls-search",
    "The calls explorer's full-text search over N tool calls (default 1,000,000 on SQLite)",
    needs_database=True,
)
def calls_search_section(ctx: BenchContext) -> list[Figure]:
    assert ctx.database_url is not None
    from .. import create_app
    from ..auth import get_or_create_project
    from ..db import db, utcnow
    from ..models import Conversation, Message
    from ..queries.call_explorer import list_calls, parse_filters

    app = create_app({"DATABASE_URL": ctx.database_url, "SECRET_KEY": "bench"})
    dialect = "sqlite" if ctx.database_url.startswith("sqlite") else "postgresql"
    n = ctx.search_calls or DEFAULT_CALLS[dialect]
    figures = []
    with app.app_context():
        try:
            project = get_or_create_project(f"{ctx.run_id}-search")
            conversation = Conversation(
                project_id=project.id, external_id=f"{ctx.run_id}-search", title="bench search"
            )
            db.session.add(conversation)
            db.session.flush()
            message = Message(
                project_id=project.id,
                external_id=f"{ctx.run_id}-search-m",
                conversation_id=conversation.id,
                role="assistant",
                created_at=utcnow(),
            )
            db.session.add(message)
            db.session.commit()
            project_id, message_id = project.id, message.id
            ctx.say(f"  inserting {n:,} calls ...")
            seconds = _insert(db.engine, project_id, message_id, n, ctx.say)
            ctx.say(f"  {n:,} calls in {seconds:.0f} s ({n / seconds:,.0f} calls/s, index kept)")
            for label, args in SEARCHES:
                filters = parse_filters(args)
                timings, rows = [], 0
                for _ in range(RUNS + 1):
                    begun = time.perf_counter()
                    page = list_calls(project_id, filters, now=utcnow(), token_cap=2000)
                    timings.append((time.perf_counter() - begun) * 1000)
                    rows = len(page.rows)
                    db.session.rollback()
                ms = statistics.median(timings[1:])  # the first run warms the cache
                verdict = "ok" if ms <= TARGET_MS else f"OVER the {TARGET_MS:.0f} ms target"
                values = {"ms": round(ms, 1), "calls": n, "rows": rows, "runs": RUNS}
                text = (
                    f"{ms:>8.1f} ms   first page of {rows} rows, median of {RUNS},"
                    f" over {n:,} calls ({verdict})"
                )
                figures.append(Figure("calls-search", ctx.target, f"search: {label}", values, text))
        finally:
            db.session.remove()
            db.engine.dispose()
    return figures
