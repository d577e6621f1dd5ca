"""Studies: a what-if over many conversations (docs/runs.md, 'Studies').

A study sends the replays of many conversations under two variants (two replay policies, two
models, or a policy against what the agent recorded) and reports for how many the model's next
action agrees. It is a ``study`` row and one ``model_run`` per conversation and variant
(``study_id``, ``variant``), executed by the run worker like any run (``services.run_worker``):

* :func:`prepare_study` picks the conversations (ids, or the conversation list's filters:
  ``queries.conversation_list.filter_conditions``), prepares the first conversation's runs as
  a probe (a variant that cannot be used is refused here: options, edits, connection) and
  estimates from the conversations' stored token counts (:func:`stored_tokens`, no replay
  built) priced at the model's price (``model_runs.run_cost``, the price source of the cost
  charts) with :data:`ESTIMATED_OUTPUT_TOKENS` of answer per run (``max_tokens`` when given).
  Over ``max_cost_usd``, :class:`StudyRefused` says by how much and nothing is stored;
* :func:`store_study` inserts the study, ``preparing``: the request ends there;
* the run worker prepares its runs, :data:`PREPARE_BATCH` conversations a step
  (:func:`prepare_next`, each run as a single run is prepared: ``model_runs.prepare_run``),
  each batch stored in one write with the study's ``prepared`` count moved on; the last batch
  makes it ``running``. The runs of a batch are sent while the next is prepared;
* the worker's claim takes a study's runs only while the study is preparing or running, not
  backed off after a 429, and up to ``concurrency`` runs ``running`` (``model_runs._claim``);
* after each of a study's runs the worker calls :func:`advance`: over the spending cap the
  study's queued runs are cancelled (``stopped``); once none is queued or running the report is
  made and stored (``succeeded``, or the ``cancelled``/``stopped`` study's final report);
* :func:`cancel_study` cancels the queued runs at once (the running ones finish and are kept:
  they are paid for).

The report (:func:`make_report`) is a pure function of the study's runs.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from flask import current_app
from sqlalchemy import Text, cast, func, select, update

from ..db import db, utcnow
from ..ingest.transaction import Write, run_write
from ..models import Conversation, Message, ModelRun, Project, Study, ToolInvocation
from ..queries import call_selection
from ..queries.call_explorer import CallFilters
from ..queries.conversation_list import ListFilters, filter_conditions
from ..queries.conversations import find_conversations
from ..replay.gc_pause import gc_paused
from ..replay.next_action import LABELS, NextAction, compare
from ..replay.units import MESSAGE_OVERHEAD
from . import model_runs, replay_answer
from .model_runs import PreparedRun, RunInputError, RunSpec

RUN = ModelRun.__table__
STUDY = Study.__table__
STATUSES = ("preparing", "running", "succeeded", "cancelled", "stopped")
# Statuses in which the study's runs are claimed (its runs are sent while the rest are prepared).
OPEN = ("preparing", "running")
VARIANTS = ("a", "b")
RECORDED = "recorded"
AGREEING = ("same_calls", "same_answer")
DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 32
MAX_CONVERSATIONS = 5000
# The answer's tokens an estimate counts per run when max_tokens is not given.
ESTIMATED_OUTPUT_TOKENS = 256
# Conversations the run worker prepares in one step (their runs stored in one write).
PREPARE_BATCH = 50


class StudyRefused(RunInputError):
    """The study would cross its spending cap: 422, with the estimate."""

    def __init__(self, message: str, estimate: dict[str, Any]):
        super().__init__("max_cost_usd", message)
        self.estimate = estimate


@dataclass(frozen=True)
class VariantSpec:
    """One side of a study: replay options (replay-API names), and optionally its own
    connection and model (default: the study's)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    connection: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class StudySpec:
    connection: str
    variants: Mapping[str, VariantSpec | str]  # "a": VariantSpec, "b": VariantSpec or RECORDED
    model: str | None = None
    conversation_ids: Sequence[str] | None = None
    filters: ListFilters | None = None
    # Or the conversations holding calls that match the calls explorer's filters.
    calls: CallFilters | None = None
    edits: Sequence[Any] | None = None
    max_cost_usd: Decimal | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    temperature: float = 0.0
    max_tokens: int | None = None


@dataclass
class PreparedStudy:
    row: dict[str, Any]
    runs: list[PreparedRun]
    estimate: dict[str, Any]


def new_study_id() -> str:
    return "study_" + secrets.token_urlsafe(12).replace("-", "x").replace("_", "y")


# --- Preparing --------------------------------------------------------------------------------


def _conversations(project_id: int, spec: StudySpec) -> list[Any]:
    c = Conversation
    if spec.conversation_ids is not None:
        wanted = list(dict.fromkeys(spec.conversation_ids))
        if not wanted:
            raise RunInputError("conversations", "name at least one conversation")
        if len(wanted) > MAX_CONVERSATIONS:
            raise RunInputError("conversations", f"at most {MAX_CONVERSATIONS} conversations")
        found: dict[str, int] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            stmt = select(c.external_id, c.id).where(
                c.project_id == project_id, c.external_id.in_(chunk)
            )
            found.update({e: i for e, i in db.session.execute(stmt)})
        missing = [cid for cid in wanted if cid not in found]
        if missing:
            raise RunInputError(
                "conversations", f"no such conversation in this project: {missing[0]!r}", 404
            )
        by_id = {r.id: r for r in find_conversations(project_id, list(found.values()))}
        return [by_id[found[cid]] for cid in wanted]
    if spec.calls is not None:
        row_ids = call_selection.conversation_ids(
            project_id,
            spec.calls,
            now=utcnow(),
            token_cap=current_app.config["REPLAY_RESULT_TOKEN_CAP"],
            limit=MAX_CONVERSATIONS + 1,
        )
    else:
        filters = spec.filters or ListFilters()
        stmt = (
            select(c.id)
            .where(*filter_conditions(project_id, filters))
            .order_by(c.updated_at.desc(), c.id.desc())
            .limit(MAX_CONVERSATIONS + 1)
        )
        row_ids = list(db.session.scalars(stmt))
    if not row_ids:
        raise RunInputError("conversations", "the filters match no conversation", 404)
    if len(row_ids) > MAX_CONVERSATIONS:
        raise RunInputError(
            "conversations", f"the filters match more than {MAX_CONVERSATIONS} conversations"
        )
    records = find_conversations(project_id, row_ids)
    order = {rid: n for n, rid in enumerate(row_ids)}
    return sorted(records, key=lambda r: order[r.id])


def _check(spec: StudySpec) -> None:
    if set(spec.variants) != set(VARIANTS):
        raise RunInputError("variants", "give exactly the variants 'a' and 'b'")
    if spec.variants["a"] == RECORDED:
        raise RunInputError("variants.a", "variant a is sent to a model; only b may be 'recorded'")
    for name in VARIANTS:
        value = spec.variants[name]
        if isinstance(value, str) and value != RECORDED:
            raise RunInputError(f"variants.{name}", "replay options, or 'recorded' (b only)")
    if not 1 <= spec.concurrency <= MAX_CONCURRENCY:
        raise RunInputError("concurrency", f"must be between 1 and {MAX_CONCURRENCY}")
    if spec.max_cost_usd is not None and spec.max_cost_usd < 0:
        raise RunInputError("max_cost_usd", "must not be negative")


def _provider(fmt: str) -> str:
    return "anthropic" if fmt == "anthropic" else "openai"


def _run_specs(spec: StudySpec) -> dict[str, RunSpec]:
    """The run of each variant that is sent (not ``recorded``), as a single run is asked."""
    specs = {}
    for name in VARIANTS:
        variant = spec.variants[name]
        if isinstance(variant, VariantSpec):
            specs[name] = RunSpec(
                connection=variant.connection or spec.connection,
                model=variant.model or spec.model,
                options=variant.options,
                edits=spec.edits,
                temperature=spec.temperature,
                max_tokens=spec.max_tokens,
            )
    return specs


def _run_specs_of(spec: Mapping[str, Any]) -> dict[str, RunSpec]:
    """:func:`_run_specs` from a stored study's ``spec`` (the worker's side)."""
    specs = {}
    for name in VARIANTS:
        variant = spec["variants"][name]
        if isinstance(variant, Mapping):
            specs[name] = RunSpec(
                connection=variant.get("connection") or spec["connection"],
                model=variant.get("model") or spec.get("model"),
                options=variant.get("options") or {},
                edits=spec.get("edits") or None,
                temperature=spec.get("temperature", 0.0),
                max_tokens=spec.get("max_tokens"),
            )
    return specs


def _variant_error(name: str, exc: RunInputError, conversation: Any) -> RunInputError:
    return RunInputError(
        f"variants.{name}.{exc.field}",
        f"{exc.message} (conversation {conversation.external_id!r})",
        exc.status,
    )


def stored_tokens(conversation_ids: Sequence[int]) -> int:
    """What the conversations hold in tokens, from the counts stored with their messages and
    calls (the token pass's; characters / 4 where it has not counted yet), plus the replay's
    per-message overhead: the whole conversation, whatever a replay option leaves out, so at
    least what its replay counts bar the tool definitions. Two aggregate reads per 500
    conversations: a study's estimate costs no replay."""
    m, t = Message, ToolInvocation
    total = 0
    for start in range(0, len(conversation_ids), 500):
        chunk = list(conversation_ids[start : start + 500])
        text = func.coalesce(m.content_tokens, func.length(func.coalesce(m.content, "")) / 4)
        total += int(
            db.session.scalar(
                select(func.coalesce(func.sum(text + MESSAGE_OVERHEAD), 0)).where(
                    m.conversation_id.in_(chunk)
                )
            )
            or 0
        )
        arguments = func.coalesce(
            t.arguments_tokens, func.length(func.coalesce(cast(t.arguments, Text), "")) / 4
        )
        result = func.coalesce(t.response_tokens, func.length(func.coalesce(t.response, "")) / 4)
        total += int(
            db.session.scalar(
                select(func.coalesce(func.sum(arguments + result + MESSAGE_OVERHEAD), 0))
                .join(m, m.id == t.message_id)
                .where(m.conversation_id.in_(chunk))
            )
            or 0
        )
        prompts = func.length(func.coalesce(Conversation.system_prompt, "")) / 4
        total += int(
            db.session.scalar(
                select(func.coalesce(func.sum(prompts), 0)).where(Conversation.id.in_(chunk))
            )
            or 0
        )
    return total


def prepare_study(
    project_id: int, spec: StudySpec, *, now: datetime | None = None
) -> PreparedStudy:
    """Check ``spec``, pick the conversations and estimate tokens and cost, without building
    every replay: the first conversation's runs are prepared as a probe (a variant that cannot
    be used fails here, before anything is stored), the estimate comes from the conversations'
    stored token counts (:func:`stored_tokens`). Reads only. Raises :class:`RunInputError` (as
    a run's: 404, 409, 422, the field prefixed with the variant) or :class:`StudyRefused` (the
    estimate crosses ``max_cost_usd``). The runs themselves are prepared by the run worker
    (:func:`prepare_next`)."""
    now = now or utcnow()
    _check(spec)
    study_id = new_study_id()
    conversations = _conversations(project_id, spec)
    overrides = db.session.scalar(select(Project.price_overrides).where(Project.id == project_id))
    output_tokens = spec.max_tokens or ESTIMATED_OUTPUT_TOKENS
    run_specs = _run_specs(spec)
    probes: dict[str, PreparedRun] = {}
    for name, run_spec in run_specs.items():
        try:
            probes[name] = model_runs.prepare_run(
                project_id, conversations[0], run_spec, now=now, study_id=study_id, variant=name
            )
        except RunInputError as exc:
            raise _variant_error(name, exc, conversations[0]) from None
    tokens = stored_tokens([c.id for c in conversations])
    per_variant: dict[str, dict[str, Any]] = {}
    unpriced: set[str] = set()
    for name, probe in probes.items():
        model = probe.row["model"]
        price = model_runs.run_cost(
            model,
            _provider(probe.row["format"]),
            tokens,
            output_tokens * len(conversations),
            0,
            overrides,
        )
        if price is None:
            unpriced.add(model)
        per_variant[name] = {
            "runs": len(conversations),
            "input_tokens": tokens,
            "output_tokens": output_tokens * len(conversations),
            "cost_usd": _money(price or Decimal(0)),
        }
    runs = len(conversations) * len(probes)
    total_cost = sum((Decimal(v["cost_usd"]) for v in per_variant.values()), Decimal(0))
    estimate = {
        "conversations": len(conversations),
        "runs": runs,
        "input_tokens": sum(v["input_tokens"] for v in per_variant.values()),
        "output_tokens": sum(v["output_tokens"] for v in per_variant.values()),
        "cost_usd": _money(total_cost),
        "unpriced_models": sorted(unpriced),
        "variants": per_variant,
        "source": "stored_tokens",
    }
    if spec.max_cost_usd is not None:
        if unpriced:
            raise StudyRefused(
                f"cannot hold the study to a spending cap: no price is known for "
                f"{', '.join(sorted(unpriced))} (add a price override in Settings)",
                estimate,
            )
        if total_cost > spec.max_cost_usd:
            raise StudyRefused(
                f"the estimated cost ${_money(total_cost)} ({runs} runs, "
                f"{estimate['input_tokens']} input tokens and about {estimate['output_tokens']} "
                f"output tokens) is over the spending cap ${_money(spec.max_cost_usd)}; "
                "nothing was started",
                estimate,
            )
    variants_json = {
        name: v
        if isinstance(v, str)
        else {"options": dict(v.options), "connection": v.connection, "model": v.model}
        for name, v in spec.variants.items()
    }
    row = {
        "id": study_id,
        "project_id": project_id,
        "status": "preparing",
        "spec": {
            "connection": spec.connection,
            "model": spec.model,
            "conversations": [c.external_id for c in conversations],
            "filters": spec.filters.query_args() if spec.filters is not None else None,
            "calls": call_selection.selection_args(spec.calls) if spec.calls is not None else None,
            "variants": variants_json,
            "edits": [dict(e) for e in (spec.edits or [])],
            "temperature": spec.temperature,
            "max_tokens": spec.max_tokens,
            "estimate": estimate,
        },
        "report": None,
        "max_cost_usd": spec.max_cost_usd,
        "cost_usd": Decimal(0),
        "runs_total": runs,
        "runs_done": 0,
        "runs_failed": 0,
        "concurrency": spec.concurrency,
        "backoff_until": None,
        "message": None,
        "prepared": 0,
        "created_at": now,
        "started_at": now,
        "finished_at": None,
    }
    return PreparedStudy(row, [], estimate)


def _money(value: Decimal | None) -> str | None:
    if value is None:
        return None
    return format(Decimal(value).quantize(Decimal("0.000001")).normalize(), "f")


def store_study(prepared: PreparedStudy) -> dict[str, Any]:
    """The store step (SQL only): the study, ``preparing``; the run worker prepares and queues
    its runs (:func:`prepare_next`). Returns the study's row."""
    db.session.execute(STUDY.insert().values(**prepared.row))
    return prepared.row


def create_study(project_id: int, spec: StudySpec) -> dict[str, Any]:
    """:func:`prepare_study` then :func:`store_study` (CLI, tests, the bench); wakes this
    process's run worker."""
    prepared = prepare_study(project_id, spec)
    db.session.commit()
    row = run_write(Write(store_study, (prepared,)))
    model_runs.notify()
    return row


# --- Preparing the runs (the run worker) --------------------------------------------------------


def preparing_study() -> str | None:
    """The oldest study whose runs are still being prepared, or None (one read)."""
    stmt = (
        select(STUDY.c.id)
        .where(STUDY.c.status == "preparing")
        .order_by(STUDY.c.created_at, STUDY.c.id)
        .limit(1)
    )
    return db.session.scalar(stmt)


def prepare_next(batch: int = PREPARE_BATCH, now: datetime | None = None) -> str | None:
    """Prepare the next ``batch`` conversations of the oldest ``preparing`` study: each
    variant's run built as a single run is (``model_runs.prepare_run``), read outside any
    write, then stored in one write with the study's ``prepared`` count moved on, only if it
    is still what this worker read (:func:`_store_batch`). A worker that stops mid-batch
    leaves the count where it was, and the next one prepares the batch again; two workers on
    one batch store it once (the count's condition, and the runs' unique key per study,
    conversation and variant). A conversation whose replay cannot be built (a turn it lacks,
    an edit that does not apply) gets a failed run saying why, so that the report lists it.
    The study's id, or None when no study is preparing."""
    study_id = preparing_study()
    if study_id is None:
        db.session.commit()
        return None
    study = db.session.execute(select(STUDY).where(STUDY.c.id == study_id)).mappings().first()
    if study is None or study["status"] != "preparing":
        db.session.commit()
        return study_id
    spec, done = study["spec"], study["prepared"]
    wanted = list(spec.get("conversations") or [])
    chunk = wanted[done : done + batch]
    runs = _prepare_runs(study["project_id"], study_id, spec, chunk, now or utcnow())
    db.session.commit()  # the reads end before the write lock
    args = (study_id, done, done + len(chunk), done + len(chunk) >= len(wanted), runs)
    if run_write(Write(_store_batch, args)):
        model_runs.notify()
    return study_id


def _prepare_runs(
    project_id: int, study_id: str, spec: Mapping[str, Any], cids: list[str], now: datetime
) -> list[PreparedRun]:
    c = Conversation
    found = dict(
        db.session.execute(
            select(c.external_id, c.id).where(c.project_id == project_id, c.external_id.in_(cids))
        ).all()
    )
    by_id = {r.id: r for r in find_conversations(project_id, list(found.values()))}
    runs: list[PreparedRun] = []
    histories: dict[int, Any] = {}  # each conversation read once, for all the variants
    for name, run_spec in _run_specs_of(spec).items():
        for cid in cids:
            conversation = by_id.get(found.get(cid, -1))
            if conversation is None:  # deleted since the study started: not compared
                continue
            if conversation.id not in histories:
                with gc_paused():  # as prepare_run loads it
                    histories[conversation.id] = replay_answer.load(conversation)
            try:
                runs.append(
                    model_runs.prepare_run(
                        project_id,
                        conversation,
                        run_spec,
                        now=now,
                        study_id=study_id,
                        variant=name,
                        loaded=histories[conversation.id],
                    )
                )
            except RunInputError as exc:
                runs.append(_unbuilt(project_id, study_id, name, conversation, exc, now))
    return runs


def _unbuilt(
    project_id: int,
    study_id: str,
    variant: str,
    conversation: Any,
    exc: RunInputError,
    now: datetime,
) -> PreparedRun:
    """A run that was never sent: its replay could not be built for this conversation."""
    row = {
        "id": model_runs.new_run_id(),
        "project_id": project_id,
        "conversation_id": conversation.id,
        "connection_id": None,
        "connection_name": "",
        "study_id": study_id,
        "variant": variant,
        "status": "failed",
        "model": "",
        "format": "",
        "options": {},
        "edits": [],
        "request": {},
        "request_key": "",
        "error_kind": "replay",
        "error_message": f"the replay could not be built: {exc.field}: {exc.message}",
        "attempts": 0,
        "created_at": now,
        "finished_at": now,
    }
    return PreparedRun(row, False, None)


def _store_batch(study_id: str, done: int, upto: int, last: bool, runs: list[PreparedRun]) -> bool:
    values: dict[str, Any] = {"prepared": upto}
    if last:
        values["status"] = "running"
    moved = db.session.execute(
        update(STUDY)
        .where(STUDY.c.id == study_id, STUDY.c.status == "preparing", STUDY.c.prepared == done)
        .values(**values),
        execution_options={"synchronize_session": False},
    )
    if moved.rowcount != 1:  # another worker stored it, or the study was cancelled or stopped
        return False
    for run in runs:
        model_runs.store_run(run)
    if last:
        _advance(study_id)  # every run answered from the cache, or none to send: done at once
    return True


# --- Progress, the spending cap, the end ------------------------------------------------------


def progress(study_id: str) -> dict[str, Any]:
    """Its runs by status, and what they cost so far (one query)."""
    stmt = (
        select(RUN.c.status, func.count(), func.sum(RUN.c.cost_usd))
        .where(RUN.c.study_id == study_id)
        .group_by(RUN.c.status)
    )
    counts = dict.fromkeys(model_runs.STATUSES, 0)
    spent = Decimal(0)
    for status, count, cost in db.session.execute(stmt):
        counts[status] = count
        spent += Decimal(cost or 0)
    total = sum(counts.values())
    return {
        "total": total,
        "done": counts["succeeded"] + counts["failed"] + counts["cancelled"],
        **counts,
        "cost_usd": _money(spent),
    }


def _left(study_id: str) -> Any:
    return (
        select(RUN.c.id)
        .where(RUN.c.study_id == study_id, RUN.c.status.in_(("queued", "running")))
        .limit(1)
        .exists()
    )


def advance(study_id: str) -> None:
    """After one of the study's runs finished: a write only when the study must change (its
    cap crossed, or nothing left to run). One read by the study's key (its status, cap and
    whether a run is left), and the sum of its runs' cost only when it has a cap."""
    found = db.session.execute(
        # finished_at, not report: a report of None is stored as JSON null, not SQL NULL.
        select(
            STUDY.c.status, STUDY.c.finished_at.is_(None), STUDY.c.max_cost_usd, _left(study_id)
        ).where(STUDY.c.id == study_id)
    ).first()
    if found is None or not found[1]:
        db.session.commit()
        return
    status, _, cap, left = found
    over = False
    if cap is not None:
        spent = db.session.scalar(
            select(func.coalesce(func.sum(RUN.c.cost_usd), 0)).where(RUN.c.study_id == study_id)
        )
        over = Decimal(spent or 0) >= Decimal(cap)
    db.session.commit()
    if over or (not left and status != "preparing"):
        run_write(Write(_advance, (study_id,)))


def advance_open() -> int:
    """Studies whose runs all finished without the worker seeing the last one (a run reaped or
    cancelled by hand): their report is made. How many."""
    running = (
        select(func.count())
        .select_from(RUN)
        .where(RUN.c.study_id == STUDY.c.id, RUN.c.status.in_(("queued", "running")))
        .scalar_subquery()
    )
    stmt = (
        select(STUDY.c.id)
        .where(STUDY.c.finished_at.is_(None), STUDY.c.status != "preparing", running == 0)
        .limit(50)
    )
    ids = list(db.session.scalars(stmt))
    db.session.commit()
    for study_id in ids:
        run_write(Write(_advance, (study_id,)))
    return len(ids)


def _advance(study_id: str) -> None:
    study = db.session.execute(select(STUDY).where(STUDY.c.id == study_id)).mappings().first()
    if study is None or study["report"] is not None:
        return
    counts = progress(study_id)
    status, message = study["status"], study["message"]
    cap = study["max_cost_usd"]
    if status in OPEN and cap is not None and Decimal(counts["cost_usd"]) >= Decimal(cap):
        status = "stopped"
        message = (
            f"stopped: the runs so far cost ${counts['cost_usd']}, which reached the spending "
            f"cap ${_money(cap)}; the queued runs were cancelled"
            + (" and the rest were not prepared" if study["status"] == "preparing" else "")
        )
        _cancel_queued(study_id)
        counts = progress(study_id)
    elif status == "preparing":
        return  # its runs are still being queued: the end comes after the last batch
    values: dict[str, Any] = {
        "status": status,
        "message": message,
        "cost_usd": Decimal(counts["cost_usd"]),
        "runs_done": counts["done"],
        "runs_failed": counts["failed"],
    }
    if counts["queued"] + counts["running"] == 0:
        values["report"] = make_report(study["spec"], _report_rows(study_id))
        values["finished_at"] = utcnow()
        if status == "running":
            values["status"] = "succeeded"
    db.session.execute(
        update(STUDY).where(STUDY.c.id == study_id).values(**values),
        execution_options={"synchronize_session": False},
    )


def _cancel_queued(study_id: str) -> int:
    result = db.session.execute(
        update(RUN)
        .where(RUN.c.study_id == study_id, RUN.c.status == "queued")
        .values(status="cancelled", finished_at=utcnow()),
        execution_options={"synchronize_session": False},
    )
    return result.rowcount


def cancel_study(project_id: int, study_id: str) -> bool:
    """Cancel the study: its queued runs are cancelled (never sent); runs already sent finish
    and are kept (they are paid for). False when it is not the project's or has ended."""
    return run_write(Write(cancel_in_transaction, (project_id, study_id)))


def cancel_in_transaction(project_id: int, study_id: str) -> bool:
    result = db.session.execute(
        update(STUDY)
        .where(
            STUDY.c.id == study_id,
            STUDY.c.project_id == project_id,
            STUDY.c.status.in_(OPEN),
        )
        .values(status="cancelled", message="cancelled: its queued runs were not sent"),
        execution_options={"synchronize_session": False},
    )
    if result.rowcount != 1:
        return False
    _cancel_queued(study_id)
    _advance(study_id)
    return True


# --- Reads and the report ---------------------------------------------------------------------


def get_study(project_id: int, study_id: str) -> dict[str, Any] | None:
    stmt = select(STUDY).where(STUDY.c.id == study_id, STUDY.c.project_id == project_id)
    found = db.session.execute(stmt).mappings().first()
    return dict(found) if found is not None else None


def _report_rows(study_id: str) -> list[dict[str, Any]]:
    stmt = (
        select(
            RUN.c.id,
            RUN.c.variant,
            RUN.c.status,
            RUN.c.next_action,
            RUN.c.comparison,
            RUN.c.input_tokens,
            RUN.c.output_tokens,
            RUN.c.cost_usd,
            RUN.c.error_kind,
            Conversation.external_id.label("conversation"),
        )
        .join(Conversation, Conversation.id == RUN.c.conversation_id)
        .where(RUN.c.study_id == study_id)
        .order_by(RUN.c.created_at, RUN.c.id)
    )
    return [dict(r) for r in db.session.execute(stmt).mappings()]


def make_report(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report of a study's runs (pure): per conversation, a's next action against b's (or
    against what the agent recorded: the run's own comparison), agreement when the category is
    one of :data:`AGREEING`; the split by category; tokens and cost per variant; the
    conversations that differ, with their runs; those not compared (a run that did not
    succeed)."""
    recorded = spec.get("variants", {}).get("b") == RECORDED
    by_conversation: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        by_conversation.setdefault(row["conversation"], {})[row["variant"]] = row
    categories: Counter[str] = Counter()
    differing: list[dict[str, Any]] = []
    incomplete: list[dict[str, Any]] = []
    for cid in spec.get("conversations") or list(by_conversation):
        runs = by_conversation.get(cid, {})
        a, b = runs.get("a"), runs.get("b")
        links = {name: runs[name]["id"] for name in sorted(runs)}
        sides = [a] if recorded else [a, b]
        if any(side is None or side["status"] != "succeeded" for side in sides):
            incomplete.append(
                {
                    "conversation": cid,
                    "runs": links,
                    "statuses": {name: runs[name]["status"] for name in sorted(runs)},
                }
            )
            continue
        assert a is not None
        if recorded:
            category = (a["comparison"] or {}).get("category", "no_recorded_action")
        else:
            assert b is not None
            category = compare(
                NextAction.from_json(b["next_action"]), NextAction.from_json(a["next_action"])
            ).category
        categories[category] += 1
        if category not in AGREEING:
            differing.append(
                {
                    "conversation": cid,
                    "category": category,
                    "label": LABELS[category],
                    "runs": links,
                }
            )
    compared = sum(categories.values())
    agree = sum(categories[c] for c in AGREEING)
    variants: dict[str, Any] = {}
    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        if not mine:
            continue
        costs = [r["cost_usd"] for r in mine if r["cost_usd"] is not None]
        variants[name] = {
            "runs": len(mine),
            "succeeded": sum(1 for r in mine if r["status"] == "succeeded"),
            "failed": sum(1 for r in mine if r["status"] == "failed"),
            "cancelled": sum(1 for r in mine if r["status"] == "cancelled"),
            "input_tokens": sum(r["input_tokens"] or 0 for r in mine),
            "output_tokens": sum(r["output_tokens"] or 0 for r in mine),
            "cost_usd": _money(sum((Decimal(c) for c in costs), Decimal(0))),
        }
    return {
        "against": RECORDED if recorded else "b",
        "conversations": len(spec.get("conversations") or by_conversation),
        "compared": compared,
        "agree": agree,
        "differ": compared - agree,
        "not_compared": len(incomplete),
        "categories": [
            {"category": c, "label": LABELS[c], "count": categories[c]}
            for c in LABELS
            if categories[c]
        ],
        "variants": variants,
        "differing": differing,
        "incomplete": incomplete,
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def document(row: Mapping[str, Any], counts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A study as the API and the page's JSON twin answer it."""
    spec = row["spec"] or {}
    counts = counts or {}
    return {
        "id": row["id"],
        "object": "study",
        "status": row["status"],
        "message": row["message"],
        "connection": spec.get("connection"),
        "model": spec.get("model"),
        "variants": spec.get("variants"),
        "edits": spec.get("edits", []),
        "filters": spec.get("filters"),
        "calls": spec.get("calls"),
        "conversations": len(spec.get("conversations") or []),
        "concurrency": row["concurrency"],
        "max_cost_usd": _money(row["max_cost_usd"]),
        "estimate": spec.get("estimate"),
        "progress": {
            # While preparing: the runs planned (those stored so far are counted by status).
            "total": row["runs_total"]
            if row["status"] == "preparing"
            else counts.get("total", row["runs_total"]),
            "prepared": row.get("prepared", 0)
            if row["status"] == "preparing"
            else len(spec.get("conversations") or []),
            "done": counts.get("done", row["runs_done"]),
            "queued": counts.get("queued", 0),
            "running": counts.get("running", 0),
            "succeeded": counts.get("succeeded", 0),
            "failed": counts.get("failed", row["runs_failed"]),
            "cancelled": counts.get("cancelled", 0),
            "cost_usd": counts.get("cost_usd", _money(row["cost_usd"])),
        },
        "backoff_until": _iso(row["backoff_until"]),
        "report": row["report"],
        "created_at": _iso(row["created_at"]),
        "finished_at": _iso(row["finished_at"]),
    }


def study_document(project_id: int, study_id: str) -> dict[str, Any] | None:
    row = get_study(project_id, study_id)
    if row is None:
        return None
    return document(row, progress(study_id))
