"""`reads`: the dashboard's pages and their JSON twins over N stored tool calls (issue 24).

The loader (``load``) writes N calls (default 100,000; ``--calls``) straight into the scratch
database of the run through the DB-API driver, in a project of their own, shaped as agents
send them: conversations of 10 turns, each a user message and an assistant message of 5 rounds
of 5 calls (25 calls a turn) with one service call per round (usage, a model of three, a stored
cost), 30 tools, 3 % errors, results of 200 B to 20 KB (most of them small), durations of 5 ms
to 30 s, over the last 7 days. Rows are the ingestion path's: the same columns, token counts as
the token pass leaves them (``heuristic:chars/4``), a stamp per call; the database keeps its
search index as every write does (FTS5 triggers, the GIN column), and the roll-ups are
recomputed from the rows once loaded (``webapp.ingest.rollups.rebuild``, what the write paths
keep in step: tests/test_storage_rollups.py checks that the two agree).

Each page is then read through the app (the Flask test client, logged in to the dashboard, the
whole request: queries, the view, the template or the JSON): ``cold`` is a request on new
database connections (the pool disposed first: no SQLite page cache of the connection, a new
PostgreSQL backend; the OS file cache and PostgreSQL's shared buffers stay warm, the bench
cannot drop them), ``warm`` the same request again on the same connection. p50/p95 in ms.
"""

from __future__ import annotations

import json
import random
import secrets
import statistics
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from .sections import BenchContext, Figure, section

DEFAULT_CALLS = 100_000
CALLS_PER_ROUND = 5
ROUNDS_PER_TURN = 5
TURNS_PER_CONVERSATION = 10
TOOLS = tuple(f"tool_{i:02d}" for i in range(30))
MODELS = (("gpt-4o", "openai"), ("claude-sonnet-4", "anthropic"), ("gpt-4o-mini", "openai"))
ERROR_EVERY = 33  # ~3 %
RARE_WORD = "zanzibarquake"  # in one call of 2,000
RARE_EVERY = 2_000
COMMON_WORD = "status"  # in every result
DAYS = 7
BATCH = 10_000
COLD_RUNS = 3
WARM_RUNS = 9
TARGET_WARM_MS = 300.0
TARGET_COLD_MS = 1000.0


def _result(rng: random.Random, i: int) -> str:
    """200 B to 20 KB, most of them small (a cubed uniform exponent)."""
    size = int(200 * 100 ** (rng.random() ** 3))
    words = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "omega")) for _ in range(8))
    body = {"status": "ok", "id": i, "text": words}
    if i % RARE_EVERY == 11:
        body["note"] = RARE_WORD
    text = json.dumps(body)
    return text + " " + "x" * max(0, size - len(text) - 1)


class _Loader:
    """Bulk rows through the driver, ids given here (the scratch project is the only writer)."""

    def __init__(self, engine: Any, project_id: int, run_id: str) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.project_id = project_id
        self.run_id = run_id
        self.mark = "?" if self.dialect == "sqlite" else "%s"

    def _at(self, at: datetime) -> Any:
        if self.dialect == "sqlite":
            return at.replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")
        return at

    def _json_mark(self) -> str:
        return f"CAST({self.mark} AS JSONB)" if self.dialect == "postgresql" else self.mark

    def _insert_sql(self, table: str, columns: tuple[str, ...], json_columns: set[str]) -> str:
        marks = ", ".join(self._json_mark() if c in json_columns else self.mark for c in columns)
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"

    def load(self, n: int, say: Any) -> tuple[int, int]:
        """n calls; (a conversation's row id in the middle, seconds taken)."""
        raw = self.engine.raw_connection()
        started = time.perf_counter()
        try:
            cursor = raw.cursor()
            ids = []
            for table in ("conversation", "message", "tool_invocation", "service_call"):
                cursor.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
                ids.append(int(cursor.fetchone()[0]) + 1)
            next_conv, next_msg, next_call, next_sc = ids
            calls_per_turn = CALLS_PER_ROUND * ROUNDS_PER_TURN
            turns = max(1, n // calls_per_turn)
            conversations = max(1, turns // TURNS_PER_CONVERSATION)
            now = datetime.now(UTC)
            start = now - timedelta(days=DAYS)
            step = timedelta(days=DAYS) / turns
            rng = random.Random(24)
            conv_sql = self._insert_sql(
                "conversation",
                ("id", "project_id", "external_id", "title", "metadata", "created_at",
                 "updated_at", "revision"),
                {"metadata"},
            )  # fmt: skip
            msg_sql = self._insert_sql(
                "message",
                ("id", "project_id", "external_id", "conversation_id", "role", "content",
                 "created_at", "status", "model", "content_tokens", "imported"),
                set(),
            )  # fmt: skip
            call_sql = self._insert_sql(
                "tool_invocation",
                ("id", "project_id", "message_id", "round_index", "sequence_index",
                 "external_tool_call_id", "function_name", "arguments", "created_at",
                 "started_at", "ended_at", "response", "response_created_at", "is_error",
                 "arguments_tokens", "response_tokens", "token_method", "response_bytes",
                 "stamp"),
                {"arguments"},
            )  # fmt: skip
            sc_sql = self._insert_sql(
                "service_call",
                ("id", "message_id", "round_index", "model", "provider", "input_tokens",
                 "output_tokens", "cached_tokens", "created_at", "started_at", "ended_at",
                 "cost_usd", "price_source", "price_version"),
                set(),
            )  # fmt: skip
            convs, msgs, calls, scs = [], [], [], []
            call_index = 0
            middle = next_conv + conversations // 2

            def flush() -> None:
                if self.dialect == "sqlite":
                    cursor.execute("BEGIN IMMEDIATE")
                for sql, rows in ((conv_sql, convs), (msg_sql, msgs), (call_sql, calls)):
                    if rows:
                        cursor.executemany(sql, rows)
                if scs:
                    cursor.executemany(sc_sql, scs)
                raw.commit()
                for rows in (convs, msgs, calls, scs):
                    rows.clear()

            for turn in range(turns):
                conv_id = next_conv + turn // TURNS_PER_CONVERSATION
                t0 = start + step * turn
                if turn % TURNS_PER_CONVERSATION == 0:
                    last = t0 + step * (TURNS_PER_CONVERSATION - 1) + timedelta(seconds=30)
                    convs.append(
                        (conv_id, self.project_id, f"{self.run_id}-c{conv_id}",
                         f"Bench conversation {conv_id}", "{}", self._at(t0), self._at(last), 0)
                    )  # fmt: skip
                user_id, assistant_id = next_msg, next_msg + 1
                next_msg += 2
                model, provider = MODELS[turn % len(MODELS)]
                msgs.append(
                    (user_id, self.project_id, f"{self.run_id}-u{user_id}", conv_id, "user",
                     "Please look into order 4411 and the invoices.", self._at(t0), None, None,
                     12, False)
                )  # fmt: skip
                msgs.append(
                    (assistant_id, self.project_id, f"{self.run_id}-a{assistant_id}", conv_id,
                     "assistant", "Done: the order shipped, the invoice is paid.",
                     self._at(t0 + timedelta(microseconds=1)), "completed", model, 11, False)
                )  # fmt: skip
                for rnd in range(ROUNDS_PER_TURN):
                    r0 = t0 + timedelta(seconds=2 * rnd)
                    input_tokens = 2_000 + 500 * rnd + rng.randint(0, 400)
                    cost: Any = (Decimal(input_tokens) * Decimal("0.0000025")).quantize(
                        Decimal("0.000000001")
                    )
                    if self.dialect == "sqlite":  # the Numeric column's form there
                        cost = float(cost)
                    scs.append(
                        (next_sc, assistant_id, rnd, model, provider, input_tokens,
                         rng.randint(20, 400), rng.randint(0, 1_000), self._at(r0),
                         self._at(r0), self._at(r0 + timedelta(milliseconds=800)), cost,
                         "bench", "1")
                    )  # fmt: skip
                    next_sc += 1
                    for seq in range(CALLS_PER_ROUND):
                        i = call_index
                        call_index += 1
                        at = r0 + timedelta(milliseconds=900 + 10 * seq)
                        result = _result(rng, i)
                        arguments = json.dumps({"query": f"order {i % 9973}", "page": seq})
                        duration = timedelta(milliseconds=5 * 6000 ** (rng.random() ** 2))
                        calls.append(
                            (next_call, self.project_id, assistant_id, rnd, seq, f"call_{i}",
                             TOOLS[rng.randrange(len(TOOLS))], arguments, self._at(at),
                             self._at(at), self._at(at + duration), result,
                             self._at(at + duration), i % ERROR_EVERY == 5,
                             len(arguments) // 4, len(result) // 4, "heuristic:chars/4",
                             len(result.encode()), secrets.randbits(62))
                        )  # fmt: skip
                        next_call += 1
                if len(calls) >= BATCH:
                    flush()
                    if call_index % 100_000 < BATCH:
                        say(f"    {call_index:,} calls ...")
            flush()
            if self.dialect == "postgresql":
                for table in ("conversation", "message", "tool_invocation", "service_call"):
                    cursor.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                        f"(SELECT max(id) FROM {table}))"
                    )
                raw.commit()
            cursor.execute("ANALYZE")
            raw.commit()
        finally:
            raw.close()
        return middle, round(time.perf_counter() - started)


def _urls(conversation_id: int) -> list[tuple[str, str]]:
    tool = TOOLS[7]
    pages = [
        ("conversation list", "/conversations"),
        ("a conversation (250 calls)", f"/conversations/{conversation_id}"),
        ("/calls", "/calls"),
        ("/calls q=rare", f"/calls?q={RARE_WORD}"),
        ("/calls q=common", f"/calls?q={COMMON_WORD}"),
        ("/calls status=error", "/calls?status=error"),
        ("/calls tool=", f"/calls?tool={tool}"),
        ("/calls sort=duration", "/calls?sort=duration"),
        ("/calls sort=size", "/calls?sort=size"),
        ("/tools (all time)", "/tools"),
        ("/tools range=24h", "/tools?range=24h"),
        ("/tools/usage (one tool)", f"/tools/usage?name={tool}"),
        ("/costs (30 days)", "/costs"),
    ]
    out = []
    for label, url in pages:
        out.append((label, url))
        path, _, query = url.partition("?")
        out.append((f"{label} .json", f"{path}.json" + (f"?{query}" if query else "")))
    out.insert(out.index(("/costs (30 days)", "/costs")), ("/tools/charts", "/tools/charts"))
    return out


def _client(app: Any, project_id: int) -> Any:
    import flask

    from ..auth import SESSION_TOKEN, start_dashboard_session
    from ..db import db

    client = app.test_client()
    with app.test_request_context():
        start_dashboard_session()
        db.session.commit()
        token = flask.session[SESSION_TOKEN]
    with client.session_transaction() as session:
        session[SESSION_TOKEN] = token
        session["project_id"] = project_id
    return client


def _timed(client: Any, url: str) -> float:
    begun = time.perf_counter()
    response = client.get(url)
    ms = (time.perf_counter() - begun) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{url}: {response.status_code} {response.data[:300]!r}")
    return ms


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


@section(
    "reads",
    "The dashboard's pages and JSON twins over --calls stored calls (default 100,000), cold "
    "and warm; runs only with --only reads",
    needs_database=True,
    by_default=False,
)
def reads_section(ctx: BenchContext) -> list[Figure]:
    assert ctx.database_url is not None
    from .. import create_app
    from ..auth import get_or_create_project
    from ..db import db
    from ..ingest.rollups import rebuild

    config = {"DATABASE_URL": ctx.database_url, "SECRET_KEY": "bench", "READ_TIMEOUT_MS": 0}
    app = create_app(config)
    n = ctx.calls or DEFAULT_CALLS
    with app.app_context():
        try:
            project_id = get_or_create_project(f"{ctx.run_id}-reads").id
            db.session.commit()
            ctx.say(f"  loading {n:,} calls ...")
            conversation_id, seconds = _Loader(db.engine, project_id, ctx.run_id).load(n, ctx.say)
            begun = time.perf_counter()
            rows = rebuild(project_id)
            db.session.commit()
            ctx.say(
                f"  {n:,} calls in {seconds} s; roll-ups ({rows:,} rows) in "
                f"{time.perf_counter() - begun:.0f} s"
            )
        finally:
            db.session.remove()
            db.engine.dispose()
    figures = []
    for label, url in _urls(conversation_id):
        cold = []
        with app.app_context():
            client = _client(app, project_id)
            db.session.remove()
            for _ in range(COLD_RUNS):
                db.engine.dispose()
                cold.append(_timed(client, url))
            _timed(client, url)
            warm = [_timed(client, url) for _ in range(WARM_RUNS)]
            db.session.remove()
        values = {
            "cold_p50_ms": round(statistics.median(cold), 1),
            "cold_p95_ms": round(_p95(cold), 1),
            "warm_p50_ms": round(statistics.median(warm), 1),
            "warm_p95_ms": round(_p95(warm), 1),
            "calls": n,
            "url": url,
        }
        over = []
        if values["warm_p50_ms"] > TARGET_WARM_MS:
            over.append(f"warm over {TARGET_WARM_MS:.0f} ms")
        if values["cold_p50_ms"] > TARGET_COLD_MS:
            over.append(f"cold over {TARGET_COLD_MS:.0f} ms")
        text = (
            f"warm {values['warm_p50_ms']:>8.1f} / {values['warm_p95_ms']:>8.1f} ms   "
            f"cold {values['cold_p50_ms']:>8.1f} / {values['cold_p95_ms']:>8.1f} ms   "
            f"(p50 / p95, {n:,} calls){'  ' + ', '.join(over) if over else ''}"
        )
        figures.append(Figure("reads", ctx.target, label, values, text))
        ctx.say(f"    {label}: {text}")
    with app.app_context():
        db.engine.dispose()
    return figures
