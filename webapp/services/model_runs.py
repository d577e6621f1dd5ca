"""Runs: one replay of a conversation sent to one model connection, and what came back
(docs/runs.md, 'Runs').

A run is a row of ``model_run``, which is also the durable queue: :func:`prepare_run` checks
what was asked and builds the replay exactly as the replay API does
(``services.replay_answer``: load, build, with the options ``replay.export.parse_query``
reads), with the edits applied to the history first (``replay.edits``); it makes the request
body (``replay.run_request``) and its key, and what the agent really did next
(``replay.next_action.recorded_next_action``). :func:`store_run` inserts the run, queued, in the
write transaction (a ``Write`` that ``run_write`` runs), or answered at once from an earlier
run with the same request key when the temperature is 0 and ``fresh`` was not asked for: the
same question is never paid for twice.

The run worker (``services.run_worker``) claims queued runs (:func:`claim_next`), sends each
(:func:`execute`: ``services.providers.send``, outside any transaction and any ``gc_paused``
region), and stores the answer, the parsed next action, usage, cost (``pricing.cost_for``, the
price source of the cost charts, with the project's overrides), latency and the comparison
with the recorded action; or the failure, with the provider's status and message. A run whose
worker stopped mid-call (its lease ran out) is queued again or failed (:func:`reap_expired`).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from flask import current_app
from sqlalchemy import and_, case, func, or_, select, update

from .. import doorbell
from ..db import db, utcnow
from ..ingest.transaction import Write, run_write
from ..models import Conversation, ModelRun, Project, Study
from ..pricing import cost_for, parse_overrides
from ..queries.histories import LoadedHistory
from ..queries.records import ConversationRecord
from ..replay.edits import EditError, apply_edits, parse_edits
from ..replay.export import OPTION_FIELDS, OptionError, parse_query
from ..replay.gc_pause import gc_paused
from ..replay.next_action import (
    NextAction,
    compare,
    parse_usage,
    recorded_next_action,
)
from ..replay.run_request import request_body, request_key
from . import replay_answer
from .model_connections import ConnectionNotFound, ConnectionUnusable, resolve_connection
from .providers import FormatMismatch, ProviderAnswer, ProviderError, check_format, send

RUN = ModelRun.__table__
STUDY = Study.__table__
STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = ("succeeded", "failed", "cancelled")

# A request's largest max_tokens and the temperature's range (OpenAI's; Anthropic's is 0..1,
# which its API checks).
MAX_OUTPUT_TOKENS = 1_000_000
MAX_TEMPERATURE = 2.0

# Error kinds of a run besides the provider's (services.providers.KINDS): its worker stopped
# mid-call on every attempt; a fault of Toolscope's own.
INTERRUPTED = "interrupted"
INTERNAL = "internal"

# A study's run rate limited (429) after the SDK's retries is queued again up to this many
# times, its study backing off BACKOFF_SECONDS times the run's attempts (STUDY_RATE_LIMIT_REQUEUES,
# STUDY_BACKOFF_SECONDS); then it fails like any run.
RATE_LIMIT_REQUEUES = 5
BACKOFF_SECONDS = 30.0


def _setting(config: Any, name: str, default: float) -> float:
    """A setting where 0 means what it says (no requeue, no wait), unlike ``or default``."""
    value = config.get(name)
    return default if value is None else value


log = logging.getLogger(__name__)


class RunInputError(ValueError):
    """What was asked cannot be run: ``field`` names the body field (the API's 422)."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


@dataclass(frozen=True)
class RunSpec:
    """A run as asked for (the API's body): the connection by name, the model (None: the
    connection's default), the replay options by their replay-API names, the edits as given,
    sampling, and ``fresh`` (do not answer from an earlier run)."""

    connection: str
    model: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    edits: Sequence[Any] | None = None
    temperature: float = 0.0
    max_tokens: int | None = None
    fresh: bool = False


@dataclass(frozen=True)
class PreparedRun:
    """A run ready to be stored: its row, and whether an earlier answer may stand for it."""

    row: dict[str, Any]
    cacheable: bool
    recorded: NextAction | None
    # The replay's counted tokens (its `estimated_tokens`): what a study's estimate adds up.
    estimated_tokens: int | None = None


def new_run_id() -> str:
    return "run_" + secrets.token_urlsafe(12).replace("-", "x").replace("_", "y")


def option_params(options: Mapping[str, Any]) -> dict[str, str]:
    """The body's option values as the replay parameters' text (``parse_query`` reads query
    strings): true/false, numbers as written, null as "not set"."""
    params: dict[str, str] = {}
    for name, value in options.items():
        if value is None:
            params[name] = ""
        elif isinstance(value, bool):
            params[name] = "true" if value else "false"
        else:
            params[name] = str(value)
    return params


def prepare_run(
    project_id: int,
    conversation: ConversationRecord,
    spec: RunSpec,
    *,
    now: datetime | None = None,
    study_id: str | None = None,
    variant: str | None = None,
    loaded: LoadedHistory | None = None,
) -> PreparedRun:
    """Check ``spec`` against the conversation and the project's connections, and build what
    will be sent. Reads only (the caller ends the read before :func:`store_run`). Raises
    :class:`RunInputError` (bad options or edits: 422, unknown connection: 404, unusable
    connection: 409). ``loaded``: the conversation's history when the caller read it already
    (a study reads each conversation once for all its variants); never changed here."""
    now = now or utcnow()
    unknown = set(spec.options) - set(OPTION_FIELDS)
    if unknown:
        name = sorted(unknown)[0]
        raise RunInputError(name, "not a replay option")
    try:
        query = parse_query(option_params(spec.options))
    except OptionError as exc:
        raise RunInputError(exc.field, exc.message) from None
    try:
        edits = parse_edits(spec.edits)
    except EditError as exc:
        raise RunInputError(_edit_field(exc), exc.message) from None
    _check_sampling(spec)
    try:
        connection = resolve_connection(db.session, project_id, spec.connection)
    except ConnectionNotFound as exc:
        raise RunInputError("connection", str(exc), 404) from None
    except ConnectionUnusable as exc:
        raise RunInputError("connection", str(exc), 409) from None
    try:
        check_format(connection.kind, query.format)
    except FormatMismatch as exc:
        raise RunInputError("format", str(exc)) from None
    model = spec.model or connection.default_model
    if not model:
        raise RunInputError(
            "model", f"connection {connection.name!r} has no default model: name one"
        )
    with gc_paused():  # the replay's whole job, as the replay API pauses it (no network here)
        if loaded is None:
            loaded = replay_answer.load(conversation)
        try:
            original = replay_answer.build(conversation, loaded, query, now)
            as_of = original.options.as_of
            history = apply_edits(loaded.history, edits, as_of=as_of) if edits else None
        except OptionError as exc:
            raise RunInputError(exc.field, exc.message, _option_status(exc)) from None
        except EditError as exc:
            raise RunInputError(_edit_field(exc), exc.message) from None
        built = original
        if history is not None:
            built = replay_answer.build(
                conversation, dataclasses.replace(loaded, history=history), query, now
            )
        body = request_body(
            query.format,
            built.result.payload,
            model=model,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
        )
        recorded = recorded_next_action(loaded.history, as_of, persistence=query.persistence)
    row = {
        "id": new_run_id(),
        "project_id": project_id,
        "conversation_id": conversation.id,
        "connection_id": connection.id,
        "connection_name": connection.name,
        "study_id": study_id,
        "variant": variant,
        "status": "queued",
        "model": model,
        "format": query.format,
        "options": dict(spec.options),
        "edits": [edit.to_json() for edit in edits],
        "as_of": as_of,
        "request": body,
        "request_key": request_key(connection.id, body),
        "recorded_action": recorded.to_json() if recorded is not None else None,
        "attempts": 0,
        "created_at": now,
    }
    cacheable = spec.temperature == 0 and not spec.fresh
    return PreparedRun(row, cacheable, recorded, built.result.stats.get("estimated_tokens"))


def _check_sampling(spec: RunSpec) -> None:
    if not 0 <= spec.temperature <= MAX_TEMPERATURE:
        raise RunInputError("temperature", f"must be between 0 and {MAX_TEMPERATURE:g}")
    if spec.max_tokens is not None and not 1 <= spec.max_tokens <= MAX_OUTPUT_TOKENS:
        raise RunInputError("max_tokens", f"must be between 1 and {MAX_OUTPUT_TOKENS}")


def _edit_field(exc: EditError) -> str:
    where = "edits" if exc.index is None else f"edits[{exc.index}]"
    return f"{where}.{exc.field}" if exc.field else where


def _option_status(exc: OptionError) -> int:
    from ..replay.export import NoSuchTurn

    return 404 if isinstance(exc, NoSuchTurn) else 422


# --- Storing a run (the store step of a Write) ------------------------------------------------


def store_run(prepared: PreparedRun) -> dict[str, Any]:
    """Insert the run (the store step: SQL only, may run twice): queued, or succeeded at once
    from the newest succeeded run with the same request key (``cached_from``). Returns the
    stored row."""
    row = {column.name: None for column in RUN.columns} | prepared.row
    if prepared.cacheable:
        earlier = (
            db.session.execute(
                select(RUN)
                .where(
                    RUN.c.project_id == row["project_id"],
                    RUN.c.request_key == row["request_key"],
                    RUN.c.status == "succeeded",
                )
                .order_by(RUN.c.finished_at.desc())
                .limit(1)
            )
            .mappings()
            .first()
        )
        if earlier is not None:
            row.update(_answered_from(earlier, prepared.recorded, row["created_at"]))
    db.session.execute(RUN.insert().values(**row))
    return row


def _answered_from(
    earlier: Mapping[str, Any], recorded: NextAction | None, now: datetime
) -> dict[str, Any]:
    """What a run answered from ``earlier`` stores: its answer and next action, its tokens (no
    cost: nothing was paid, and no latency: nothing was waited for)."""
    comparison = None
    if earlier["next_action"] is not None:
        comparison = compare(NextAction.from_json(earlier["next_action"]), recorded).to_json()
    return {
        "status": "succeeded",
        "cached_from": earlier["cached_from"] or earlier["id"],
        "response": earlier["response"],
        "next_action": earlier["next_action"],
        "comparison": comparison,
        "input_tokens": earlier["input_tokens"],
        "output_tokens": earlier["output_tokens"],
        "cost_usd": Decimal(0),
        "latency_ms": 0,
        "started_at": now,
        "finished_at": now,
    }


def create_run(
    project_id: int, conversation: ConversationRecord, spec: RunSpec, **kwargs: Any
) -> dict[str, Any]:
    """:func:`prepare_run` then :func:`store_run` through ``run_write`` (for callers that are
    not an API prepare step: the CLI, studies, tests). Wakes this process's worker."""
    prepared = prepare_run(project_id, conversation, spec, **kwargs)
    db.session.commit()  # the read ends before the write lock
    row = run_write(Write(store_run, (prepared,)))
    notify()
    return row


# In-process wake-up: a worker thread of this process (`toolscope serve`) starts a new run at
# once instead of at its next poll. Under gunicorn the doorbell (webapp/doorbell.py) carries the
# wake-up from a web worker to the token pass process's run worker; other servers poll.
_waiters: list[Any] = []


def notify() -> None:
    for event in list(_waiters):
        event.set()
    doorbell.ring()


# --- Reads -----------------------------------------------------------------------------------


def _with_conversation():
    return select(RUN, Conversation.external_id.label("conversation_external_id")).join(
        Conversation, Conversation.id == RUN.c.conversation_id
    )


def get_run(project_id: int, run_id: str) -> dict[str, Any] | None:
    """The project's run ``run_id`` with its conversation's id, or None (another project's run
    is not found either)."""
    stmt = _with_conversation().where(RUN.c.id == run_id, RUN.c.project_id == project_id)
    found = db.session.execute(stmt).mappings().first()
    return dict(found) if found is not None else None


def list_runs(project_id: int, conversation_id: int, limit: int = 100) -> list[dict[str, Any]]:
    """A conversation's runs, newest first."""
    stmt = (
        _with_conversation()
        .where(RUN.c.conversation_id == conversation_id, RUN.c.project_id == project_id)
        .order_by(RUN.c.created_at.desc(), RUN.c.id.desc())
        .limit(limit)
    )
    return [dict(r) for r in db.session.execute(stmt).mappings()]


# --- The queue -------------------------------------------------------------------------------


def claim_next(owner: str, lease_seconds: float, now: datetime | None = None) -> str | None:
    """Claim the oldest queued run for ``owner``: its id, or None (:func:`claim_batch` of one)."""
    claimed = claim_batch(owner, 1, lease_seconds, now)
    return claimed[0][0] if claimed else None


def claim_batch(
    owner: str, limit: int, lease_seconds: float, now: datetime | None = None
) -> list[tuple[str, str | None]]:
    """Claim up to ``limit`` of the oldest queued runs for ``owner`` (status running, a lease
    until now + ``lease_seconds``, one more attempt) in one write transaction: their ids and
    study ids, oldest first; none when nothing is queued. On PostgreSQL the rows are picked
    ``FOR UPDATE SKIP LOCKED`` (other servers' workers skip them), on SQLite the write lock is
    held and the update is conditional anyway: a run is claimed by one worker only. A study's
    runs are claimed only up to its free slots (its concurrency less its runs ``running``).
    An idle queue costs one read (no write transaction, so idle workers never take SQLite's
    write lock)."""
    queued = db.session.execute(select(RUN.c.id).where(RUN.c.status == "queued").limit(1))
    found = queued.first() is not None
    db.session.commit()
    if not found:
        return []
    return run_write(Write(_claim, (owner, max(1, limit), lease_seconds, now)))


def _claim(
    owner: str, limit: int, lease_seconds: float, now: datetime | None
) -> list[tuple[str, str | None]]:
    now = now or utcnow()
    pick = (
        select(RUN.c.id, RUN.c.study_id)
        .where(RUN.c.status == "queued", or_(RUN.c.study_id.is_(None), _open_study(now)))
        .order_by(RUN.c.created_at, RUN.c.id)
        .limit(limit)
    )
    postgresql = db.session.get_bind().dialect.name == "postgresql"
    if postgresql:
        pick = pick.with_for_update(of=RUN, skip_locked=True)
    picked = db.session.execute(pick).all()
    study_ids = sorted({study_id for _, study_id in picked if study_id is not None})
    slots: dict[str, int] = {}
    if study_ids:
        if postgresql:
            # Claims of one study's runs wait for each other here, so two servers cannot both
            # see one slot free: the count is taken again under the study rows' locks.
            db.session.execute(
                select(STUDY.c.id).where(STUDY.c.id.in_(study_ids)).with_for_update()
            )
        slots = dict.fromkeys(study_ids, 0)
        running = (
            select(func.count())
            .select_from(RUN)
            .where(RUN.c.study_id == STUDY.c.id, RUN.c.status == "running")
            .scalar_subquery()
        )
        stmt = select(STUDY.c.id, STUDY.c.concurrency - running).where(
            STUDY.c.id.in_(study_ids), _open_study(now, None, whole=False)
        )
        slots.update({study_id: int(free) for study_id, free in db.session.execute(stmt)})
    chosen: list[tuple[str, str | None]] = []
    for run_id, study_id in picked:
        if study_id is not None:
            if slots[study_id] <= 0:
                continue
            slots[study_id] -= 1
        chosen.append((run_id, study_id))
    if not chosen:
        return []
    claimed = db.session.execute(
        update(RUN)
        .where(RUN.c.id.in_([run_id for run_id, _ in chosen]), RUN.c.status == "queued")
        .values(
            status="running",
            lease_owner=owner,
            lease_until=now + timedelta(seconds=lease_seconds),
            attempts=RUN.c.attempts + 1,
            started_at=now,
        ),
        execution_options={"synchronize_session": False},
    )
    if claimed.rowcount != len(chosen):  # cannot happen under the lock: claim nothing
        raise RuntimeError("claimed runs changed under the write lock")
    return chosen


def release(runs: Mapping[str, str]) -> int:
    """Give back claimed runs that were never started (run id → owner; a worker stopping):
    queued again, the attempt not counted. How many."""
    if not runs:
        return 0
    return run_write(Write(_release, (dict(runs),)))


def _release(runs: dict[str, str]) -> int:
    released = 0
    for run_id, owner in sorted(runs.items()):
        result = db.session.execute(
            update(RUN)
            .where(RUN.c.id == run_id, RUN.c.lease_owner == owner, RUN.c.status == "running")
            .values(
                status="queued",
                lease_owner=None,
                lease_until=None,
                started_at=None,
                attempts=RUN.c.attempts - 1,
            ),
            execution_options={"synchronize_session": False},
        )
        released += result.rowcount
    return released


# Made once: an alias builds its column collection anew each time (~10 ms of Python a claim).
_STUDY_RUN = RUN.alias("study_run")


def _open_study(now: datetime, study_id: str | None = None, *, whole: bool = True) -> Any:
    """The run's study (``study_id``: that study) is preparing or running, not backed off
    after a 429, and has fewer runs ``running`` than its concurrency (docs/runs.md,
    'Studies'); ``whole=False``: the study row's own condition, without the count."""
    inner = _STUDY_RUN
    running = (
        select(func.count())
        .select_from(inner)
        .where(inner.c.study_id == STUDY.c.id, inner.c.status == "running")
        .scalar_subquery()
    )
    open_ = and_(
        STUDY.c.status.in_(("preparing", "running")),
        or_(STUDY.c.backoff_until.is_(None), STUDY.c.backoff_until <= now),
    )
    if whole:
        open_ = and_(open_, running < STUDY.c.concurrency)
    if study_id is not None:
        return and_(STUDY.c.id == study_id, open_)
    if not whole:
        return open_
    return RUN.c.study_id.in_(select(STUDY.c.id).where(open_))


def heartbeat(leases: Mapping[str, str], lease_seconds: float) -> int:
    """Extend the leases of the runs being executed (run id → owner); how many were still
    this worker's."""
    if not leases:
        return 0
    return run_write(Write(_heartbeat, (dict(leases), lease_seconds)))


def _heartbeat(leases: dict[str, str], lease_seconds: float) -> int:
    until = utcnow() + timedelta(seconds=lease_seconds)
    extended = 0
    for run_id, owner in sorted(leases.items()):
        result = db.session.execute(
            update(RUN)
            .where(RUN.c.id == run_id, RUN.c.lease_owner == owner, RUN.c.status == "running")
            .values(lease_until=until),
            execution_options={"synchronize_session": False},
        )
        extended += result.rowcount
    return extended


def reap_expired(max_attempts: int, now: datetime | None = None) -> int:
    """Runs left ``running`` by a worker that stopped (its lease ran out): queued again while
    they have attempts left, else failed, saying so. How many were reaped (one read when
    there is none)."""
    expired = and_(RUN.c.status == "running", RUN.c.lease_until < (now or utcnow()))
    found = db.session.execute(select(RUN.c.id).where(expired).limit(1)).first() is not None
    db.session.commit()
    if not found:
        return 0
    return run_write(Write(_reap, (max_attempts, now)))


def _reap(max_attempts: int, now: datetime | None) -> int:
    now = now or utcnow()
    expired = and_(RUN.c.status == "running", RUN.c.lease_until < now)
    retry = RUN.c.attempts < max_attempts
    message = (
        "the worker running this run stopped before it finished (its lease ran out) on "
        f"every attempt ({max_attempts}); not tried again"
    )
    result = db.session.execute(
        update(RUN)
        .where(expired)
        .values(
            status=case((retry, "queued"), else_="failed"),
            lease_owner=None,
            lease_until=None,
            error_status=None,
            error_kind=case((retry, None), else_=INTERRUPTED),
            error_message=case((retry, None), else_=message),
            finished_at=case((retry, None), else_=now),
        ),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount


# --- Executing a claimed run -------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What :func:`execute` stored: the run's final status, and whether this worker still held
    it (False: its lease had run out and the run was taken from it; nothing was stored)."""

    status: str
    stored: bool


def execute(run_id: str, owner: str) -> Outcome:
    """Send the claimed run ``run_id`` and store what came back. Reads the run and its
    connection in a short read transaction, ends it, waits on the provider outside any
    transaction (and outside ``gc_paused``), then stores the result in a write transaction,
    only if ``owner`` still holds the run's lease."""
    config = current_app.config
    row = db.session.execute(select(RUN).where(RUN.c.id == run_id)).mappings().first()
    if row is None or row["status"] != "running" or row["lease_owner"] != owner:
        db.session.commit()
        return Outcome(row["status"] if row is not None else "gone", False)
    if row["study_id"] is not None and _study_ended(row["study_id"]):
        # Claimed in a batch before its study was cancelled or stopped at its cap, and not
        # sent yet: the study's end holds for it as for its queued runs.
        db.session.commit()
        stored = run_write(Write(_finish, (run_id, owner, {"status": "cancelled"})))
        return Outcome("cancelled", stored)
    overrides = db.session.scalar(
        select(Project.price_overrides).where(Project.id == row["project_id"])
    )
    try:
        connection = _connection_of(row)
    except ProviderError as exc:
        db.session.commit()
        return _store_failure(run_id, owner, exc)
    db.session.commit()  # no transaction (no snapshot, no lock) while the provider thinks
    try:
        answer = send(
            connection,
            row["format"],
            row["request"],
            timeout=float(config.get("MODEL_TIMEOUT_SECONDS") or 120),
            max_retries=int(config.get("MODEL_MAX_RETRIES") or 0),
        )
        values = _success_values(row, answer, connection.kind, overrides)
    except ProviderError as exc:
        if exc.kind == "rate_limited" and row["study_id"] is not None:
            limit = int(_setting(config, "STUDY_RATE_LIMIT_REQUEUES", RATE_LIMIT_REQUEUES))
            if row["attempts"] <= limit:
                backoff = float(_setting(config, "STUDY_BACKOFF_SECONDS", BACKOFF_SECONDS))
                args = (run_id, owner, row["study_id"], backoff * row["attempts"], exc.message)
                if run_write(Write(_back_off, args)):
                    return Outcome("queued", True)
        return _store_failure(run_id, owner, exc)
    except Exception as exc:  # a fault of ours: the run says so and fails, it is not retried
        log.exception("run %s failed inside Toolscope", run_id)
        db.session.rollback()
        failure = ProviderError(
            None, INTERNAL, f"the run failed inside Toolscope ({type(exc).__name__}); see the log"
        )
        return _store_failure(run_id, owner, failure)
    stored = run_write(Write(_finish, (run_id, owner, values)))
    return Outcome("succeeded", stored)


def _back_off(run_id: str, owner: str, study_id: str, seconds: float, message: str) -> bool:
    """A study's run still rate limited after the SDK's retries: queued again (not failed), and
    its study claims nothing for ``seconds`` (growing with the run's attempts), so a study backs
    off from the provider instead of failing all its runs."""
    now = utcnow()
    result = db.session.execute(
        update(RUN)
        .where(RUN.c.id == run_id, RUN.c.status == "running", RUN.c.lease_owner == owner)
        .values(
            status="queued",
            lease_owner=None,
            lease_until=None,
            error_status=429,
            error_kind="rate_limited",
            error_message=message,
        ),
        execution_options={"synchronize_session": False},
    )
    db.session.execute(
        update(STUDY)
        .where(STUDY.c.id == study_id)
        .values(backoff_until=now + timedelta(seconds=seconds)),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount == 1


def _connection_of(row: Mapping[str, Any]) -> Any:
    if row["connection_id"] is None:
        raise ProviderError(
            None, "connection", f"model connection {row['connection_name']!r} was removed"
        )
    try:
        connection = resolve_connection(db.session, row["project_id"], row["connection_name"])
    except (ConnectionNotFound, ConnectionUnusable) as exc:
        raise ProviderError(None, "connection", str(exc)) from None
    if connection.id != row["connection_id"]:
        raise ProviderError(
            None,
            "connection",
            f"model connection {row['connection_name']!r} was replaced since the run was made",
        )
    return connection


def _success_values(
    row: Mapping[str, Any],
    answer: ProviderAnswer,
    provider: str,
    overrides: Mapping[str, Any] | None,
) -> dict[str, Any]:
    usage = parse_usage(row["format"], answer.answer)
    input_tokens, output_tokens = usage.input_tokens, usage.output_tokens
    recorded = None
    if row["recorded_action"] is not None:
        recorded = NextAction.from_json(row["recorded_action"])
    comparison = compare(answer.next_action, recorded).to_json()
    return {
        "status": "succeeded",
        "response": answer.answer,
        "next_action": answer.next_action.to_json(),
        "comparison": comparison,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": run_cost(
            row["model"],
            provider,
            input_tokens,
            output_tokens,
            usage.cache_read_tokens,
            overrides,
            cache_write_tokens=usage.cache_write_tokens,
        ),
        "latency_ms": answer.latency_ms,
        "error_status": None,
        "error_kind": None,
        "error_message": None,
    }


def run_cost(
    model: str,
    provider: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    cached_tokens: int | None,
    overrides: Mapping[str, Any] | None,
    *,
    cache_write_tokens: int | None = None,
) -> Decimal | None:
    """What the run cost in USD, priced as the cost charts price a service call
    (``pricing.cost_for`` with the project's overrides; ``ingest.usage.price_usage``): None when
    the usage or the model's price is unknown."""
    if input_tokens is None or output_tokens is None:
        return None
    try:
        cost = cost_for(
            model,
            provider,
            input_tokens,
            output_tokens,
            cached_tokens or 0,
            overrides=parse_overrides(overrides),  # a broken one is skipped, as the charts do
            cache_write_tokens=cache_write_tokens or 0,
        )
    except ValueError:
        return None
    return None if cost is None else Decimal(cost.total_usd)


def _study_ended(study_id: str) -> bool:
    status = db.session.scalar(select(STUDY.c.status).where(STUDY.c.id == study_id))
    return status in ("cancelled", "stopped")


def _store_failure(run_id: str, owner: str, exc: ProviderError) -> Outcome:
    values = {
        "status": "failed",
        "error_status": exc.status,
        "error_kind": exc.kind,
        "error_message": exc.message,
    }
    stored = run_write(Write(_finish, (run_id, owner, values)))
    return Outcome("failed", stored)


def _finish(run_id: str, owner: str, values: dict[str, Any]) -> bool:
    """Store a run's outcome if ``owner`` still holds it (a run cancelled or taken by another
    worker meanwhile keeps what it has)."""
    result = db.session.execute(
        update(RUN)
        .where(RUN.c.id == run_id, RUN.c.status == "running", RUN.c.lease_owner == owner)
        .values(**values, lease_owner=None, lease_until=None, finished_at=utcnow()),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount == 1


def cancel_run(project_id: int, run_id: str) -> bool:
    """Cancel a queued or running run (a running one's answer, when it comes, is not stored);
    False when it had finished or is not the project's."""
    return run_write(Write(cancel_in_transaction, (project_id, run_id)))


def cancel_in_transaction(project_id: int, run_id: str) -> bool:
    """:func:`cancel_run`'s store step (a write view runs it in its own transaction)."""
    result = db.session.execute(
        update(RUN)
        .where(
            RUN.c.id == run_id,
            RUN.c.project_id == project_id,
            RUN.c.status.in_(("queued", "running")),
        )
        .values(status="cancelled", lease_owner=None, lease_until=None, finished_at=utcnow()),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount == 1


# --- The run document -------------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def document(row: Mapping[str, Any], conversation_external_id: str | None = None) -> dict[str, Any]:
    """A run as the API and the JSON twins answer it (docs/runs.md, 'Runs')."""
    cost = row["cost_usd"]
    error = None
    if row["error_kind"] is not None or row["error_message"] is not None:
        error = {
            "status": row["error_status"],
            "kind": row["error_kind"],
            "message": row["error_message"],
        }
    request = row["request"] or {}
    return {
        "id": row["id"],
        "conversation": conversation_external_id or row.get("conversation_external_id"),
        "connection": row["connection_name"],
        "model": row["model"],
        "format": row["format"],
        "status": row["status"],
        "options": row["options"],
        "edits": row["edits"],
        "as_of": _iso(row["as_of"]),
        "temperature": request.get("temperature"),
        "max_tokens": request.get("max_tokens", request.get("max_output_tokens")),
        "request": request,
        "request_key": row["request_key"],
        "response": row["response"],
        "next_action": row["next_action"],
        "recorded_action": row["recorded_action"],
        "comparison": row["comparison"],
        "usage": {"input_tokens": row["input_tokens"], "output_tokens": row["output_tokens"]},
        "cost_usd": None if cost is None else format(Decimal(cost).normalize(), "f"),
        "latency_ms": row["latency_ms"],
        "error": error,
        "attempts": row["attempts"],
        "cached_from": row["cached_from"],
        "study_id": row["study_id"],
        "variant": row["variant"],
        "created_at": _iso(row["created_at"]),
        "started_at": _iso(row["started_at"]),
        "finished_at": _iso(row["finished_at"]),
    }
