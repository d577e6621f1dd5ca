"""Every setting Toolscope reads, declared once: name, default, parser and help.

The README's configuration table is written from this list (and a test keeps them in step).
Each setting is read from the environment variable ``TOOLSCOPE_<NAME>``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "TOOLSCOPE_"


def _bool(raw: str) -> bool:
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _optional_int(raw: str) -> int | None:
    return int(raw) if raw.strip() else None


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "DATABASE_URL",
        None,
        "SQLAlchemy URL. Default: SQLite file `toolscope.db` in the instance folder. "
        "PostgreSQL: `postgresql+psycopg://user:pass@host:5432/dbname`.",
    ),
    Setting(
        "SECRET_KEY",
        None,
        "Signs session cookies and CSRF tokens. Default: a random key generated once and kept "
        "in `instance/secret_key`. Set it explicitly when running several servers.",
    ),
    Setting(
        "PREVIOUS_SECRET_KEYS",
        (),
        "Comma-separated earlier SECRET_KEYs. Model connections' stored API keys and headers are "
        "encrypted under a key derived from SECRET_KEY; after SECRET_KEY changes, list the old "
        "one here so they still decrypt, then run `toolscope connections rotate` to re-encrypt "
        "them under the new one (see docs/runs.md).",
        lambda raw: tuple(k.strip() for k in raw.split(",") if k.strip()),
    ),
    Setting(
        "MODEL_CONNECTION_ALLOWED_HOSTS",
        (),
        "Comma-separated hosts a model connection's base URL may name: a hostname, or "
        "`*.domain` for any host below it. Empty: any host; the server then sends requests "
        "wherever a dashboard user points a connection, internal addresses included (see "
        "docs/runs.md). Checked when a connection is added and whenever it is used.",
        lambda raw: tuple(h.strip().lower().rstrip(".") for h in raw.split(",") if h.strip()),
    ),
    Setting(
        "PASSWORD",
        None,
        "Password for the dashboard login. Without it the dashboard is closed, unless DEV is on.",
    ),
    Setting(
        "DEV",
        False,
        "Development mode: the dashboard needs no login for requests from loopback addresses "
        "(127.0.0.1, ::1) only, and the session cookie is not marked Secure.",
        _bool,
    ),
    Setting(
        "LOGIN_WINDOW_SECONDS",
        900,
        "Length of the window in which dashboard login attempts are counted (429 with "
        "Retry-After once a limit below is reached; a successful login clears the count).",
        int,
    ),
    Setting(
        "LOGIN_ATTEMPTS_PER_ADDRESS",
        10,
        "Most login attempts from one client address per window.",
        int,
    ),
    Setting(
        "LOGIN_ATTEMPTS_PER_ACCOUNT",
        100,
        "Most login attempts on the dashboard account per window, from all addresses together: "
        "slows guessing from many addresses, at the price of locking the login for one window "
        "when someone floods it.",
        int,
    ),
    Setting(
        "TRUSTED_PROXIES",
        0,
        "How many reverse proxies in front of Toolscope append to X-Forwarded-For. With 0 the "
        "client address is the connection's; behind one proxy (HTTPS termination) set 1, or "
        "every client counts as the proxy's address in the login limit.",
        int,
    ),
    Setting(
        "SESSION_COOKIE_SECURE",
        True,
        "Mark the session cookie Secure (HTTPS only). Turned off automatically in DEV mode.",
        _bool,
    ),
    Setting("MAX_BODY_BYTES", 8 * 1024 * 1024, "Largest request body accepted (413 above).", int),
    Setting(
        "BODY_TIMEOUT_SECONDS",
        30.0,
        "How long a client may take to send a request body (408 after). Behind a reverse proxy "
        "that buffers bodies, the proxy's own timeouts apply first.",
        float,
    ),
    Setting("MAX_TOOLS_PER_REQUEST", 50, "Most tool invocations in one write request.", int),
    Setting("MAX_IDS_PER_REQUEST", 200, "Most message ids in one `GET /messages/tools`.", int),
    Setting("MAX_MESSAGES_PER_REQUEST", 500, "Most messages in one write request.", int),
    Setting(
        "MAX_RESULT_BYTES",
        2 * 1024 * 1024,
        "Largest tool response content stored (422 above).",
        int,
    ),
    Setting(
        "OTLP_MAX_BODY_BYTES",
        32 * 1024 * 1024,
        "Largest OTLP export body accepted, compressed or decompressed (413 above); OTLP SDKs "
        "send batches of 512 spans, which with content exceed MAX_BODY_BYTES.",
        int,
    ),
    Setting(
        "OTLP_MAX_ATTRIBUTE_BYTES",
        64 * 1024,
        "Longest string stored from an OTLP span or log record (an attribute's key or value, at "
        "any depth; a span, event or scope name; a status message), in UTF-8 bytes: longer ones "
        "are stored cut and marked `toolscope.truncated`.",
        int,
    ),
    Setting(
        "OTLP_MAX_RAW_SPAN_BYTES",
        1024 * 1024,
        "Largest raw part of one stored OTLP span or log record (attributes, events, links, "
        "resource, as JSON): what does not fit is left out and marked `toolscope.truncated`.",
        int,
    ),
    Setting(
        "OTLP_STITCH_WINDOW_SECONDS",
        86_400,
        "How far apart two LLM calls of one service may start and still be joined into one turn "
        "by their tool-call ids (bare per-call instrumentations send one trace per call).",
        int,
    ),
    Setting(
        "OTLP_CONVERSATION_KEYS",
        (),
        "Comma-separated span attribute keys read as the conversation id before the standard "
        "ones (`gen_ai.conversation.id`, `session.id`, ...), e.g. `app.thread_id`.",
        lambda raw: tuple(k.strip() for k in raw.split(",") if k.strip()),
    ),
    Setting(
        "FRESHNESS_SECONDS",
        300,
        "Default replay freshness window for new projects; channels may override it.",
        int,
    ),
    Setting(
        "LIVE_POLL_SECONDS",
        2.0,
        "How often an open conversation page asks for new activity while an agent is writing.",
        float,
    ),
    Setting(
        "REPLAY_RESULT_TOKEN_CAP",
        2000,
        "Per-result token cap that the timeline's 'would be truncated' badge forecasts (a "
        "result longer than this many tokens is cut by the replay's truncation rule); empty "
        "turns the badge off. The replay preview has its own option.",
        _optional_int,
    ),
    Setting(
        "REPLAY_CACHE_MB",
        64.0,
        "Memory each web worker may give to answers of the replay API and the preview's JSON "
        "and download, kept for when the same replay is asked again and nothing it depends on "
        "changed, and as much again to what it made of the tool call rows it loaded, reused by "
        "the next replay of the conversation for the rows that read back unchanged (both filled "
        "by replays only; see docs/replay.md); 0 turns both off.",
        float,
    ),
    Setting(
        "DEFAULT_PROJECT",
        "default",
        "Slug of the project the CLI and the demo use when none is named.",
    ),
    Setting(
        "SQLITE_BUSY_TIMEOUT_MS",
        10_000,
        "How long an SQLite writer waits for the write lock before failing.",
        int,
    ),
    Setting(
        "PG_LOCK_TIMEOUT_MS",
        10_000,
        "How long a PostgreSQL writer waits for a row lock before the request is answered 503 "
        "with Retry-After (clients retry), rather than queueing without bound.",
        int,
    ),
    Setting(
        "READ_TIMEOUT_MS",
        20_000,
        "Longest a page or API GET may spend in one database transaction (SQLite: a progress "
        "handler, PostgreSQL: statement_timeout); past it the query is stopped and the request "
        "answered 503 `query_timeout` with Retry-After, well before gunicorn's 60 s timeout "
        "would kill the worker. Writes and the token pass are not limited; 0 turns it off.",
        int,
    ),
    Setting(
        "TOKEN_PASS_SECONDS",
        1.0,
        "How often the server's token pass (a process the gunicorn master starts, or a thread "
        "of `toolscope serve`) counts the tokens of newly stored tool calls and messages "
        "(writes leave them to this pass); 0 turns it off, then run `toolscope tokens count`.",
        float,
    ),
    Setting(
        "TOKEN_PASS_MAX_LAG_SECONDS",
        30.0,
        "While tool calls and messages are stored faster than 1,000 a second, the token pass "
        "leaves the CPU and the database's write lock to the writes and counts only the rows "
        "stored this many seconds ago or earlier, then catches up when the burst ends; 0 "
        "counts at once whatever the load.",
        float,
    ),
    Setting(
        "ATTRIBUTION_REFRESH_SECONDS",
        10.0,
        "How often the server recomputes the stored 'which tools make the agent expensive' "
        "figures of conversations written since (a thread beside the token pass: in its "
        "process under gunicorn, in `toolscope serve` itself), up to 50 conversations per "
        "project a step; 0 turns it off, then the chart replays the stale ones itself, 20 "
        "per request, and says when more are pending.",
        float,
    ),
    Setting(
        "RUN_WORKERS",
        4,
        "How many runs (replays sent to a model, docs/runs.md) the server sends at once: "
        "threads of its run worker, which works through the queue of runs in the database "
        "(in the token pass process under gunicorn, in `toolscope serve` itself); 0 turns "
        "it off, then run `toolscope runs work`. Under gunicorn that process starts when "
        "either TOKEN_PASS_SECONDS or RUN_WORKERS is above 0.",
        int,
    ),
    Setting(
        "RUN_LEASE_SECONDS",
        60.0,
        "How long a run worker holds a run it sends without renewing its lease (it renews "
        "it every third of this while the provider answers): a run whose worker was "
        "killed is taken up again this long after.",
        float,
    ),
    Setting(
        "RUN_MAX_ATTEMPTS",
        2,
        "How many times a run is started before a run whose worker keeps stopping "
        "mid-call (its lease ran out) is marked failed instead of queued again.",
        int,
    ),
    Setting(
        "RUN_POLL_SECONDS",
        0.5,
        "How often an idle run worker looks at the queue without being woken (a run queued "
        "through this server wakes it at once; one queued through another server on the "
        "same database waits for this).",
        float,
    ),
    Setting(
        "STUDY_BACKOFF_SECONDS",
        30.0,
        "How long a study waits before sending more runs after one of them is still rate "
        "limited (429) after the SDK's retries, times that run's attempts (docs/runs.md, "
        "'Studies').",
        float,
    ),
    Setting(
        "STUDY_RATE_LIMIT_REQUEUES",
        5,
        "How many times a study's run that is still rate limited after the SDK's retries is "
        "queued again (its study backing off) before it fails like any run.",
        int,
    ),
    Setting(
        "MODEL_TIMEOUT_SECONDS",
        120.0,
        "Longest wait for a model provider's answer to one request of a run (the SDK's "
        "timeout), each retry included anew.",
        float,
    ),
    Setting(
        "MODEL_MAX_RETRIES",
        2,
        "How many times the provider's SDK retries a run's request after a 429, a 5xx "
        "answer, a timeout or a dropped connection (with its own back-off) before the run "
        "fails.",
        int,
    ),
)


def load(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read every setting from the environment, falling back to its default."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        raw = environ.get(setting.env_var)
        values[setting.name] = setting.default if raw is None else setting.parse(raw)
    return values
