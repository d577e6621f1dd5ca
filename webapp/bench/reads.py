"""`reads`: the dashboard's pages and their JSON twins over N stored tool calls (issue 24).

The loader (``load``) writes N calls (default 100,000; ``--calls``) straight into the scratch
database of the run through the DB-API driver, in a project of their own, shaped as agents
send them: conversations of 10 turns, each a user message and an assistant message of 5 rounds
of 5 calls (25 calls a turn) with one service call per round (usage, a model of three, a stored
cost), 30 tools, 3 % errors, results of 200 B to 20 KB (most of them small), durations of 5 ms
to 30 s, over the last 7 days. It is a bulk loader that produces the rows the ingestion path
produces: the same columns, token counts as the token pass leaves them when it counts by
``heuristic:chars/4`` (``webapp.tokens.heuristic_tokens`` of the compact arguments and of the
result), a stamp per call, the search index (SQLite's FTS5 rows as its insert trigger writes
them, PostgreSQL's generated column), and the roll-ups as ``webapp.ingest.rollups.rebuild``
computes them from the rows (what the write paths keep in step); see ``_Loader`` for how it is
fast (1,000,000 calls in minutes) and tests/test_bench_reads_loader.py for the checks that
keep it identical.

Each page is then read through the app (the Flask test client, logged in to the dashboard, the
whole request: queries, the view, the template or the JSON): ``cold`` is a request on new
database connections (the pool disposed first: no SQLite page cache of the connection, a new
PostgreSQL backend; the OS file cache and PostgreSQL's shared buffers stay warm, the bench
cannot drop them), ``warm`` the same request again on the same connection. p50/p95 in ms.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
from dataclasses import fields
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
# A page slower than this in all gets fewer runs (at least one cold and one warm; the figure
# says how many): at 1M calls a page of 30 s would otherwise take its 13 runs, 7 minutes.
PAGE_SECONDS = 60.0
TARGET_WARM_MS = 300.0
TARGET_COLD_MS = 1000.0


USER_TEXT = "Please look into order 4411 and the invoices."
ASSISTANT_TEXT = "Done: the order shipped, the invoice is paid."
RESULT_POOL = 4_096  # distinct result shapes (size, words); the id in each text stays the call's
DURATION_POOL = 4_096  # distinct durations


def _pools(rng: random.Random) -> tuple[list[tuple[int, str]], list[int]]:
    """Results of 200 B to 20 KB, most of them small (a cubed uniform exponent), as (size,
    words); durations of 5 ms to 30 s in microseconds. Drawn once: per call only the pick."""
    results = []
    for _ in range(RESULT_POOL):
        size = int(200 * 100 ** (rng.random() ** 3))
        words = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "omega")) for _ in range(8))
        results.append((size, words))
    durations = [int(5_000 * 6000 ** (rng.random() ** 2)) for _ in range(DURATION_POOL)]
    return results, durations


def _result(i: int, size: int, words: str) -> str:
    """The text json.dumps gives for {"status", "id", "text"[, "note"]}, padded to ``size``."""
    note = f', "note": "{RARE_WORD}"' if i % RARE_EVERY == 11 else ""
    text = f'{{"status": "ok", "id": {i}, "text": "{words}"{note}}}'
    return text + " " + "x" * max(0, size - len(text) - 1)


class _Bucket:
    """One (tool, hour) of the loaded calls, summed as the roll-up sums them: counts, and the
    values its sketches are filled with, by value (a value added n times is one add of n)."""

    __slots__ = ("bytes_sum", "calls", "durations_us", "errors", "last_us", "tokens", "tokens_sum")

    def __init__(self) -> None:
        self.calls = self.errors = self.bytes_sum = self.tokens_sum = self.last_us = 0
        self.durations_us: dict[int, int] = {}
        self.tokens: dict[int, int] = {}

    def part(self) -> Any:
        from ..analytics.rollups import CallPart

        p = CallPart(
            calls=self.calls, errors=self.errors, responses=self.calls, bytes_n=self.calls,
            bytes_sum=self.bytes_sum, tokens_n=self.calls, tokens_sum=self.tokens_sum,
            timed=self.calls, last_at=_EPOCH + timedelta(microseconds=self.last_us),
        )  # fmt: skip
        for us, count in self.durations_us.items():
            # As add_row computes it from the stored stamps: (ended - started) in ms.
            p.durations.add(timedelta(microseconds=us).total_seconds() * 1000.0, count)
        for tokens, count in self.tokens.items():
            p.sizes.add(float(tokens), count)
        return p


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR_US = 3_600_000_000
_TABLES = ("conversation", "message", "tool_invocation", "service_call")
_COLUMNS = {
    "conversation": ("id", "project_id", "external_id", "title", "metadata", "created_at",
                     "updated_at", "revision"),
    "message": ("id", "project_id", "external_id", "conversation_id", "role", "content",
                "created_at", "status", "model", "content_tokens", "imported"),
    "tool_invocation": ("id", "project_id", "message_id", "round_index", "sequence_index",
                        "external_tool_call_id", "function_name", "arguments", "created_at",
                        "started_at", "ended_at", "response", "response_created_at", "is_error",
                        "arguments_tokens", "response_tokens", "token_method", "response_bytes",
                        "stamp"),
    "service_call": ("id", "message_id", "round_index", "model", "provider", "input_tokens",
                     "output_tokens", "cached_tokens", "created_at", "started_at", "ended_at",
                     "cost_usd", "price_source", "price_version"),
}  # fmt: skip


class _Loader:
    """Bulk rows through the driver into the run's scratch database, ids given here (the
    scratch project is the only writer). What makes it fast, none of it changing a row:

    * per call only a few random picks: result shapes and durations come from pools drawn once;
    * large batches (SQLite ``executemany`` in transactions of BATCH calls, PostgreSQL ``COPY``);
    * the secondary indexes of the four tables are dropped for the load and made again from
      their own stored definitions afterwards (a sort instead of a million random inserts);
      SQLite's search index is filled by one ``INSERT ... SELECT`` of what its insert trigger
      would have written (the trigger is dropped and made again around it); PostgreSQL
      computes its generated search column as for any insert;
    * the roll-ups are summed while the rows are made (``_Bucket``), not read back from them;
      tests/test_bench_reads_loader.py checks that they equal ``rebuild``'s recomputation.
    """

    def __init__(self, engine: Any, project_id: int, run_id: str) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.project_id = project_id
        self.run_id = run_id
        self.tools: dict[tuple[str, int], _Bucket] = {}
        self.models: dict[tuple[str, datetime, int], Any] = {}

    def _at(self, us: int) -> Any:
        at = _EPOCH + timedelta(microseconds=us)
        if self.dialect == "sqlite":  # the stored text of SQLAlchemy's DateTime there
            return at.replace(tzinfo=None).isoformat(" ", "microseconds")
        return at

    def load(self, n: int, say: Any) -> tuple[int, int]:
        """n calls; (a conversation's row id in the middle, seconds taken)."""
        raw = self.engine.raw_connection()
        started = time.perf_counter()
        try:
            cursor = raw.cursor()
            first = []
            for table in _TABLES:
                cursor.execute(f"SELECT coalesce(max(id), 0) FROM {table}")
                first.append(int(cursor.fetchone()[0]) + 1)
            raw.commit()
            dropped = self._drop_secondary(cursor)
            raw.commit()
            try:
                middle = self._rows(n, first, raw, cursor, say)
            finally:
                say(f"    rows in {time.perf_counter() - started:.0f} s; indexes ...")
                begun = time.perf_counter()
                self._restore(cursor, dropped, first[2])
                raw.commit()
                say(f"    search index and indexes in {time.perf_counter() - begun:.0f} s")
            if self.dialect == "postgresql":
                for table in _TABLES:
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

    # -- indexes and the search index around the load ---------------------------------------

    def _drop_secondary(self, cursor: Any) -> list[tuple[str, str]]:
        """Drop the non-constraint indexes of the four tables (and SQLite's search trigger);
        their definitions, to make them again."""
        from ..models import CALL_FTS

        names = ", ".join(f"'{t}'" for t in _TABLES)
        if self.dialect == "sqlite":
            cursor.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE tbl_name IN "
                f"({names}) AND sql IS NOT NULL AND (type = 'index' OR name = ?)",
                (f"{CALL_FTS}_insert",),
            )
            dropped = [
                (f"DROP {kind.upper()} {name}", sql) for kind, name, sql in cursor.fetchall()
            ]
            cursor.execute("PRAGMA cache_size = -262144")  # 256 MiB for this connection
            cursor.execute("PRAGMA synchronous = OFF")  # a scratch database: no fsync per batch
        else:
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                f"AND tablename IN ({names}) AND indexname NOT IN (SELECT conname FROM "
                "pg_constraint)"
            )
            dropped = [(f"DROP INDEX {name}", sql) for name, sql in cursor.fetchall()]
            cursor.execute("SET synchronous_commit = off")
            cursor.execute("SET maintenance_work_mem = '512MB'")
        for drop, _ in dropped:
            cursor.execute(drop)
        return [(drop, sql) for drop, sql in dropped]

    def _restore(self, cursor: Any, dropped: list[tuple[str, str]], first_call: int) -> None:
        from ..models import CALL_FTS
        from ..models import SEARCH_CHARS as FTS_MAX

        if self.dialect == "sqlite":
            # What the insert trigger writes for each new call (webapp.models.CALL_FTS_SQLITE).
            cursor.execute(
                f"INSERT INTO {CALL_FTS}(rowid, arguments, response) SELECT id, "
                f"substr(arguments, 1, {FTS_MAX}), substr(response, 1, {FTS_MAX}) "
                "FROM tool_invocation WHERE id >= ? ORDER BY id",
                (first_call,),
            )
        for _, sql in dropped:
            cursor.execute(sql)

    # -- the rows ----------------------------------------------------------------------------

    def _rows(self, n: int, first: list[int], raw: Any, cursor: Any, say: Any) -> int:
        from ..analytics.rollups import UsagePart, usage_part
        from ..ingest.values import compact_json
        from ..tokens import HEURISTIC_METHOD, heuristic_tokens

        next_conv, next_msg, next_call, next_sc = first
        calls_per_turn = CALLS_PER_ROUND * ROUNDS_PER_TURN
        turns = max(1, n // calls_per_turn)
        conversations = max(1, turns // TURNS_PER_CONVERSATION)
        end_us = (datetime.now(UTC) - _EPOCH) // timedelta(microseconds=1)
        start_us = end_us - DAYS * 86_400_000_000
        step_us = DAYS * 86_400_000_000 // turns
        rng = random.Random(24)
        results, durations = _pools(rng)
        bits, pick = rng.getrandbits, rng.randrange
        at, project_id, run_id = self._at, self.project_id, self.run_id
        rows: dict[str, list[tuple[Any, ...]]] = {t: [] for t in _TABLES}
        convs, msgs, calls, scs = (rows[t] for t in _TABLES)
        tools, models = self.tools, self.models
        call_index = 0
        for turn in range(turns):
            conv_id = next_conv + turn // TURNS_PER_CONVERSATION
            t0 = start_us + step_us * turn
            if turn % TURNS_PER_CONVERSATION == 0:
                last = t0 + step_us * (TURNS_PER_CONVERSATION - 1) + 30_000_000
                convs.append(
                    (conv_id, project_id, f"{run_id}-c{conv_id}", f"Bench conversation {conv_id}",
                     "{}", at(t0), at(last), 0)
                )  # fmt: skip
            user_id, assistant_id = next_msg, next_msg + 1
            next_msg += 2
            model, provider = MODELS[turn % len(MODELS)]
            msgs.append(
                (user_id, project_id, f"{run_id}-u{user_id}", conv_id, "user",
                 USER_TEXT, at(t0), None, None, heuristic_tokens(USER_TEXT), False)
            )  # fmt: skip
            msgs.append(
                (assistant_id, project_id, f"{run_id}-a{assistant_id}", conv_id, "assistant",
                 ASSISTANT_TEXT, at(t0 + 1), "completed", model,
                 heuristic_tokens(ASSISTANT_TEXT), False)
            )  # fmt: skip
            for rnd in range(ROUNDS_PER_TURN):
                r0 = t0 + 2_000_000 * rnd
                input_tokens = 2_000 + 500 * rnd + pick(401)
                cost = (Decimal(input_tokens) * Decimal("0.0000025")).quantize(
                    Decimal("0.000000001")
                )
                usage = (input_tokens, pick(20, 401), pick(1_001), cost)
                scs.append(
                    (next_sc, assistant_id, rnd, model, provider, *usage[:3], at(r0), at(r0),
                     at(r0 + 800_000), float(cost) if self.dialect == "sqlite" else cost,
                     "bench", "1")
                )  # fmt: skip
                next_sc += 1
                key = (model, r0 // _HOUR_US)
                part = usage_part(
                    {"input_tokens": usage[0], "output_tokens": usage[1],
                     "cached_tokens": usage[2], "cost_usd": cost}
                )  # fmt: skip
                models.setdefault(key, UsagePart()).merge(part)
                for seq in range(CALLS_PER_ROUND):
                    i = call_index
                    call_index += 1
                    created = r0 + 900_000 + 10_000 * seq
                    size, words = results[bits(12)]
                    result = _result(i, size, words)
                    arguments_value = {"query": f"order {i % 9973}", "page": seq}
                    # Stored as the JSON column writes it; counted as the token pass counts it.
                    arguments = json.dumps(arguments_value)
                    duration = durations[bits(12)]
                    ended = at(created + duration)
                    tool = TOOLS[pick(len(TOOLS))]
                    error = i % ERROR_EVERY == 5
                    tokens = heuristic_tokens(result)
                    calls.append(
                        (next_call, project_id, assistant_id, rnd, seq, f"call_{i}", tool,
                         arguments, at(created), at(created), ended, result, ended, error,
                         heuristic_tokens(compact_json(arguments_value)), tokens,
                         HEURISTIC_METHOD, len(result),
                         bits(62))
                    )  # fmt: skip
                    next_call += 1
                    bucket = tools.get((tool, created // _HOUR_US))
                    if bucket is None:
                        bucket = tools[(tool, created // _HOUR_US)] = _Bucket()
                    bucket.calls += 1
                    bucket.errors += error
                    bucket.bytes_sum += len(result)
                    bucket.tokens_sum += tokens
                    bucket.last_us = max(bucket.last_us, created)
                    bucket.durations_us[duration] = bucket.durations_us.get(duration, 0) + 1
                    bucket.tokens[tokens] = bucket.tokens.get(tokens, 0) + 1
            if len(calls) >= BATCH:
                self._write(raw, cursor, rows)
                if call_index % 100_000 < BATCH:
                    say(f"    {call_index:,} calls ...")
        self._write(raw, cursor, rows)
        return next_conv + conversations // 2

    def _write(self, raw: Any, cursor: Any, rows: dict[str, list[tuple[Any, ...]]]) -> None:
        if self.dialect == "sqlite":
            cursor.execute("BEGIN IMMEDIATE")
            for table, batch in rows.items():
                if batch:
                    columns = _COLUMNS[table]
                    cursor.executemany(
                        f"INSERT INTO {table} ({', '.join(columns)}) "
                        f"VALUES ({', '.join('?' * len(columns))})",
                        batch,
                    )
        else:
            copying = raw.driver_connection.cursor()
            for table, batch in rows.items():
                if batch:
                    sql = f"COPY {table} ({', '.join(_COLUMNS[table])}) FROM STDIN"
                    with copying.copy(sql) as copy:
                        for row in batch:
                            copy.write_row(row)
        raw.commit()
        for batch in rows.values():
            batch.clear()

    # -- the roll-ups of what was loaded -------------------------------------------------------

    def write_rollups(self, connection: Any) -> int:
        """The tool and model roll-ups of the loaded calls, as ``rebuild`` would write them:
        each hour's sums, and each day's as the merge of its hours."""
        from ..analytics.rollups import DAY, HOUR, CallPart, UsagePart, bucket_start
        from ..models import ModelRollup, ToolRollup

        hour_parts = {
            (name, _EPOCH + timedelta(hours=hour)): b.part()
            for (name, hour), b in self.tools.items()
        }
        tools: dict[tuple[int, datetime, str], Any] = {}
        for (name, hour), part in hour_parts.items():
            tools[(HOUR, hour, name)] = part
            day = tools.setdefault((DAY, bucket_start(hour, DAY), name), CallPart())
            day.merge(part)
        models: dict[tuple[int, datetime, str], Any] = {}
        for (model, hour_n), part in self.models.items():
            hour = _EPOCH + timedelta(hours=hour_n)
            models[(HOUR, hour, model)] = part
            models.setdefault((DAY, bucket_start(hour, DAY), model), UsagePart()).merge(part)
        sums = [f.name for f in fields(CallPart) if f.name not in _NOT_SUMS]
        tool_rows = [
            {"project_id": self.project_id, "span": span, "bucket": bucket,
             "function_name": name, **{s: getattr(p, s) for s in sums},
             "durations": p.durations.encode(), "sizes": p.sizes.encode(), "last_at": p.last_at}
            for (span, bucket, name), p in tools.items()
        ]  # fmt: skip
        model_sums = [f.name for f in fields(UsagePart)]
        model_rows = [
            {"project_id": self.project_id, "span": span, "bucket": bucket, "model": model,
             **{s: getattr(p, s) for s in model_sums}}
            for (span, bucket, model), p in models.items()
        ]  # fmt: skip
        for table, table_rows in ((ToolRollup.__table__, tool_rows),
                                  (ModelRollup.__table__, model_rows)):  # fmt: skip
            for start in range(0, len(table_rows), 2_000):
                connection.execute(table.insert(), table_rows[start : start + 2_000])
        return len(tool_rows) + len(model_rows)


_NOT_SUMS = {"durations", "sizes", "last_at", "removed"}


def _derived_tables(loader: _Loader) -> int:
    """Fill the tables the write paths keep in step with the rows, for the loaded project, in
    one transaction; the number of rows written. Each stored derivation of the calls gets its
    fill here (and a test that it equals its recomputation, tests/test_bench_reads_loader.py)."""
    with loader.engine.begin() as connection:
        rows = loader.write_rollups(connection)
        # Other derived tables of the loaded project: filled here, after the roll-ups.
    return rows + _tool_costs(loader.project_id)


def _tool_costs(project_id: int) -> int:
    """The stored tool costs of every loaded conversation, as the chart (or a refresh) stores
    them: computed by the same code, in the app's session (the project has no price
    overrides); the number of rows."""
    from sqlalchemy import func, select

    from ..db import db
    from ..models import ConversationToolCost
    from ..services.attribution_store import refresh_stale

    refresh_stale(project_id, {})
    where = ConversationToolCost.project_id == project_id
    rows = db.session.scalar(select(func.count()).select_from(ConversationToolCost).where(where))
    db.session.commit()
    return int(rows or 0)


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

    config = {"DATABASE_URL": ctx.database_url, "SECRET_KEY": "bench", "READ_TIMEOUT_MS": 0}
    app = create_app(config)
    n = ctx.calls or DEFAULT_CALLS
    with app.app_context():
        try:
            project_id = get_or_create_project(f"{ctx.run_id}-reads").id
            db.session.commit()
            ctx.say(f"  loading {n:,} calls ...")
            loader = _Loader(db.engine, project_id, ctx.run_id)
            conversation_id, seconds = loader.load(n, ctx.say)
            begun = time.perf_counter()
            rows = _derived_tables(loader)
            ctx.say(
                f"  {n:,} calls in {seconds} s; derived tables ({rows:,} rows) in "
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
            begun = time.perf_counter()
            for _ in range(COLD_RUNS):
                db.engine.dispose()
                cold.append(_timed(client, url))
                if time.perf_counter() - begun > PAGE_SECONDS / 2:
                    break
            _timed(client, url)
            warm = []
            while len(warm) < WARM_RUNS and (
                not warm or time.perf_counter() - begun < PAGE_SECONDS
            ):
                warm.append(_timed(client, url))
            db.session.remove()
        values = {
            "cold_p50_ms": round(statistics.median(cold), 1),
            "cold_p95_ms": round(_p95(cold), 1),
            "warm_p50_ms": round(statistics.median(warm), 1),
            "warm_p95_ms": round(_p95(warm), 1),
            "calls": n,
            "url": url,
            "runs": [len(cold), len(warm)],
            "load_average_1m": round(os.getloadavg()[0], 2),
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


# -- growth: two runs' figures side by side ------------------------------------------------------


def _figures(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (target["name"], figure["label"]): figure["values"]
        for target in report["targets"]
        for figure in target["figures"]
        if figure["section"] == "reads"
    }


def _met(ok: bool) -> str:
    return "✅" if ok else "❌"


def growth_table(small: dict[str, Any], large: dict[str, Any]) -> str:
    """A Markdown table of two `--only reads --json` runs (e.g. 100,000 and 1,000,000 calls):
    per target and page, warm and cold p50 of each, the growth (large / small) and the issue's
    targets met or missed: warm ≤ 300 ms and cold ≤ 1 s (≤ 1 s warm from 5,000,000 calls on),
    growth ≤ x2 (warm p50)."""
    a, b = _figures(small), _figures(large)
    lines = []
    for target in dict.fromkeys(name for name, _ in b):
        rows = [(label, a.get((t, label)), v) for (t, label), v in b.items() if t == target]
        n_small = next((s["calls"] for _, s, _ in rows if s), None)
        n_large = rows[0][2]["calls"]
        sizes = f"{n_small:,} → {n_large:,}" if n_small else f"{n_large:,}"
        lines += [
            f"**{target}**, {sizes} calls (p50 ms; growth = large / small)",
            "",
            f"| page | {n_small or 0:,} warm | {n_large:,} warm | {n_large:,} cold "
            "| growth warm | growth cold | targets |",
            "|---|---|---|---|---|---|---|",
        ]
        warm_target = TARGET_COLD_MS if n_large >= 5_000_000 else TARGET_WARM_MS
        for label, s, v in rows:
            marks = [f"warm {_met(v['warm_p50_ms'] <= warm_target)}"]
            if n_large < 5_000_000:
                marks.append(f"cold {_met(v['cold_p50_ms'] <= TARGET_COLD_MS)}")
            grow_warm = grow_cold = "-"
            if s:
                g = v["warm_p50_ms"] / s["warm_p50_ms"]
                grow_warm = f"x{g:.1f}"
                grow_cold = f"x{v['cold_p50_ms'] / s['cold_p50_ms']:.1f}"
                marks.append(f"growth {_met(g <= 2)}")
            lines.append(
                f"| {label} | {s['warm_p50_ms'] if s else '-'} | {v['warm_p50_ms']} "
                f"| {v['cold_p50_ms']} | {grow_warm} | {grow_cold} | {' '.join(marks)} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m webapp.bench.reads SMALL.json LARGE.json
    import sys

    with open(sys.argv[1]) as first, open(sys.argv[2]) as second:
        print(growth_table(json.load(first), json.load(second)))
