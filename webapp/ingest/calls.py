"""Tool calls: redaction, measurement and token counts (pure, done before the write lock), then
bulk, idempotent storage.

A call is keyed by (message, round_index, sequence_index). Storing a batch loads the stored rows
for its keys in one query, compares in Python, and writes with one multi-row INSERT and at most
one executemany UPDATE (for responses that arrive after their call).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

from sqlalchemy import Text, bindparam, select, update

from ..db import db
from ..redaction import CompiledRules
from ..sql import TOOL, json_from_text, new_stamp
from . import rollups
from .errors import Conflict, Duplicate, Invalid, RaceLost
from .values import clean_json, clean_text, compact_json


@dataclass(slots=True)
class CallDraft:
    """One tool call of a request, normalised from either API, before redaction."""

    field: str  # where it sits in the request, for error messages: "tools.3"
    round_index: int
    sequence_index: int
    external_id: str
    function_name: str
    arguments: dict[str, Any] | None
    response: str | None = None  # None: no response (yet). "" is a response.
    is_error: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    response_created_at: datetime | None = None


@dataclass(slots=True)
class PreparedCall:
    """A redacted call with its computed columns, ready to compare and insert.

    Its token counts are left empty (NULL): tokenizing was a third of a write's CPU, so it is
    done after the answer, by the token pass (`webapp.ingest.tokens`), which counts every row
    whose text has no count yet. Readers that need a count before the pass got there count on
    the fly (`webapp.queries.histories`).
    """

    field: str
    row: dict[str, Any]  # tool_invocation columns (arguments as a dict)
    arguments_json: str | None
    # (round_index, sequence_index) of ``row``: made once, where a write looks it up six times
    # per call (a property made the tuple each time: ~2 µs of a call's ~55).
    key: tuple[int, int]


def prepare_calls(
    drafts: Sequence[CallDraft],
    rules: CompiledRules,
    *,
    now: datetime,
    max_result_bytes: int,
) -> list[PreparedCall]:
    """Redact and measure one message's calls; skipped calls are left out.

    Pure (no database): callers run it before taking the write lock.

    Raises `Invalid` for a result over the size limit, arguments that are not JSON, or two
    different calls with the same (round, sequence) in the request. Identical repeats are
    merged: a client may resend a call within one batch.
    """
    prepared: dict[tuple[int, int], PreparedCall] = {}
    for draft in drafts:
        call = _prepare_call(draft, rules, now, max_result_bytes)
        if call is None:
            continue
        earlier = prepared.get(call.key)
        if earlier is None:
            prepared[call.key] = call
        elif _differences(earlier.row, call.row):
            raise Duplicate(
                call.field,
                f"round {call.key[0]}, sequence {call.key[1]} appears twice in this request "
                f"with different content (first at {earlier.field})",
                duplicate_of=earlier.field,
            )
    return list(prepared.values())


def _check_result_size(draft: CallDraft, response: str | None, limit: int) -> int | None:
    """The result's size in bytes; `Invalid` when it is over the limit."""
    if response is None:
        return None
    size = len(response.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise Invalid(
            f"{draft.field}.response.content",
            f"result is {size} bytes, over the limit of {limit}",
            limit=limit,
        )
    return size


def _prepare_call(
    draft: CallDraft,
    rules: CompiledRules,
    now: datetime,
    max_result_bytes: int,
) -> PreparedCall | None:
    response = clean_text(draft.response)
    arguments = draft.arguments
    policy = rules.policy_for(draft.function_name)
    redactions: list[str] | None = None
    if not policy.is_noop:
        if policy.skip_rule is not None:
            return None
        # Redaction reads the whole result: it gets no more than the limit to read.
        _check_result_size(draft, response, max_result_bytes)
        redacted = policy.apply(arguments, response)
        arguments, response = redacted.arguments, redacted.response
        redactions = redacted.rule_names or None

    arguments_json = None
    if arguments is not None:
        try:
            arguments_json = compact_json(arguments)
        except ValueError:
            raise Invalid(
                f"{draft.field}.arguments", "NaN and Infinity are not valid JSON values"
            ) from None
        if "\\u0000" in arguments_json:
            arguments = clean_json(arguments)
            arguments_json = compact_json(arguments)

    response_bytes = _check_result_size(draft, response, max_result_bytes)

    created_at = draft.created_at or now
    row = {
        "round_index": draft.round_index,
        "sequence_index": draft.sequence_index,
        "external_tool_call_id": draft.external_id,
        "function_name": draft.function_name,
        "arguments": arguments,
        "created_at": created_at,
        "started_at": draft.started_at,
        "ended_at": draft.ended_at,
        "response": response,
        "response_created_at": (
            (draft.response_created_at or draft.ended_at or now) if response is not None else None
        ),
        "is_error": bool(draft.is_error) if response is not None else False,
        "redactions": redactions,
        "arguments_tokens": None,
        "response_tokens": None,
        "token_method": None,
        "response_bytes": response_bytes,
    }
    return PreparedCall(
        draft.field, row, arguments_json, (draft.round_index, draft.sequence_index)
    )


def _differences(stored: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Which fields of a resubmitted call conflict with the stored one.

    A missing response on either side is not a difference: the response may come later, and a
    late retry of the post that had none must not fail.
    """
    diffs = []
    if stored["function_name"] != new["function_name"]:
        diffs.append("function_name")
    if stored["external_tool_call_id"] != new["external_tool_call_id"]:
        diffs.append("external_tool_call_id")
    if stored["arguments"] != new["arguments"]:
        diffs.append("arguments")
    if stored["response"] is not None and new["response"] is not None:
        if stored["response"] != new["response"]:
            diffs.append("response")
        elif bool(stored["is_error"]) != bool(new["is_error"]):
            diffs.append("is_error")
    return diffs


# --- Tool calls: storage --------------------------------------------------------------------

_TOOL_COLUMNS = (
    TOOL.c.id,
    TOOL.c.message_id,
    TOOL.c.round_index,
    TOOL.c.sequence_index,
    TOOL.c.external_tool_call_id,
    TOOL.c.function_name,
    TOOL.c.arguments,
    TOOL.c.created_at,
    TOOL.c.started_at,
    TOOL.c.ended_at,
    TOOL.c.response,
    TOOL.c.response_created_at,
    TOOL.c.is_error,
    TOOL.c.redactions,
    TOOL.c.arguments_tokens,
    TOOL.c.response_tokens,
    TOOL.c.token_method,
    TOOL.c.response_bytes,
)

# The prepared row's columns that are inserted as they are (ids and JSON are added apart).
_ROW_KEYS = (
    "round_index",
    "sequence_index",
    "external_tool_call_id",
    "function_name",
    "created_at",
    "started_at",
    "ended_at",
    "response",
    "response_created_at",
    "is_error",
    "arguments_tokens",
    "response_tokens",
    "token_method",
    "response_bytes",
)


@dataclass
class CallBatch:
    """The prepared calls of one stored message, and how errors should name that message."""

    message_id: int
    message_label: str
    calls: list[PreparedCall]
    # The message was inserted by this very transaction: it has no stored calls to compare
    # with (nobody else can see it before the commit), so they are not read.
    new_message: bool = False


def store_calls(project_id: int, batches: Sequence[CallBatch]) -> dict[int, list[dict[str, Any]]]:
    """Insert new calls, add responses to stored ones; return every batch call's stored row.

    Constant number of statements: one SELECT (none when every message is new), one INSERT,
    at most one UPDATE.
    """
    wanted = [(b.message_id, c) for b in batches for c in b.calls]
    if not wanted:
        return {b.message_id: [] for b in batches}
    stored_messages = {b.message_id for b in batches if not b.new_message}
    existing = (
        _load_calls(stored_messages, {c.row["round_index"] for _, c in wanted})
        if stored_messages
        else {}
    )
    labels = {b.message_id: b.message_label for b in batches}

    inserts: list[tuple[int, PreparedCall]] = []
    updates: list[dict[str, Any]] = []
    result: dict[tuple[int, int, int], dict[str, Any]] = {}
    for message_id, call in wanted:
        key = (message_id, *call.key)
        stored = existing.get(key)
        if stored is None:
            inserts.append((message_id, call))
            continue
        diffs = _differences(stored, call.row)
        if diffs:
            raise _call_conflict(call, labels[message_id], diffs)
        if stored["response"] is None and call.row["response"] is not None:
            old, stored = stored, _with_response(stored, call.row)
            rollups.change_call(project_id, old, stored)
            updates.append(stored)
        result[key] = stored

    for message_id, row in _insert_calls(project_id, inserts):
        result[(message_id, row["round_index"], row["sequence_index"])] = row
        rollups.add_calls(project_id, (row,))
    _update_responses(updates)

    out: dict[int, list[dict[str, Any]]] = {b.message_id: [] for b in batches}
    for message_id, call in wanted:
        out[message_id].append(result[(message_id, *call.key)])
    return out


# Statements are built once: building them per request costs more than running them.
# Filtering by round as well keeps this cheap for a long run posted round by round.
_LOAD_CALLS = select(*_TOOL_COLUMNS).where(
    TOOL.c.message_id.in_(bindparam("message_ids", expanding=True)),
    TOOL.c.round_index.in_(bindparam("rounds", expanding=True)),
)

_UPDATE_RESPONSES = (
    update(TOOL)
    .where(TOOL.c.id == bindparam("b_id"))
    .values(
        response=bindparam("b_response"),
        response_created_at=bindparam("b_response_created_at"),
        is_error=bindparam("b_is_error"),
        response_tokens=bindparam("b_response_tokens"),
        response_bytes=bindparam("b_response_bytes"),
        started_at=bindparam("b_started_at"),
        ended_at=bindparam("b_ended_at"),
        token_method=bindparam("b_token_method"),
        redactions=json_from_text(bindparam("b_redactions", type_=Text)),
        stamp=bindparam("b_stamp"),
    )
)


# The INSERT's columns, in the order of the values of each row.
_INSERT_COLUMNS = ("project_id", "message_id", *_ROW_KEYS, "arguments", "redactions", "stamp")
# Rows per statement: 19 values each stays well under SQLite's 32,766 parameters.
_INSERT_CHUNK = 500


@dataclass(frozen=True)
class _InsertPlan:
    """The tool-call INSERT as driver SQL, built once per dialect: a multi-row
    `INSERT ... VALUES (...), (...) ON CONFLICT DO NOTHING RETURNING ...` sent with
    `exec_driver_sql`, each value converted by its column type's own bind processor. The same
    statement SQLAlchemy's insertmanyvalues would send, without compiling and processing the
    parameters of every row through the ORM session (that was half a write's CPU)."""

    head: str
    row: str
    tail: str
    # (index in `_INSERT_COLUMNS`, function) for the columns whose values need converting:
    # the type's bind processor (and, for the JSON recordset, ISO text for a timestamp).
    converters: tuple[tuple[int, Callable[[Any], Any]], ...]
    # PostgreSQL: the rows as one JSON parameter, `INSERT ... SELECT FROM
    # jsonb_to_recordset(...)`: a short statement with one parameter whatever the number of
    # rows. (psycopg parses a long statement again on every execution, and dumps arrays of
    # text through a regular expression per element: both cost more than the rest of a write.)
    recordset: str | None = None

    def statement(self, rows: int) -> str:
        return self.head + ", ".join([self.row] * rows) + self.tail


_INSERT_PLANS: dict[str, _InsertPlan] = {}


def _insert_plan(dialect: Any) -> _InsertPlan:
    plan = _INSERT_PLANS.get(dialect.name)
    if plan is None:
        plan = _INSERT_PLANS[dialect.name] = _make_insert_plan(dialect)
    return plan


def _make_insert_plan(dialect: Any) -> _InsertPlan:
    mark = "?" if dialect.paramstyle == "qmark" else "%s"
    json_mark = f"CAST({mark} AS JSONB)" if dialect.name == "postgresql" else mark
    marks = [json_mark if c in ("arguments", "redactions") else mark for c in _INSERT_COLUMNS]
    processors = [
        None
        if c in ("arguments", "redactions")  # JSON text, passed as it is
        else TOOL.c[c].type.dialect_impl(dialect).bind_processor(dialect)
        for c in _INSERT_COLUMNS
    ]
    if dialect.name == "postgresql":
        processors = [_then_iso(p) if p is not None else None for p in processors]
    converters = tuple((i, p) for i, p in enumerate(processors) if p is not None)
    columns = ", ".join(_INSERT_COLUMNS)
    tail = " ON CONFLICT DO NOTHING RETURNING id, message_id, round_index, sequence_index"
    recordset = None
    if dialect.name == "postgresql":
        types = [
            "TEXT" if c in ("arguments", "redactions") else TOOL.c[c].type.compile(dialect)
            for c in _INSERT_COLUMNS
        ]
        selected = [
            f"CAST(t.{c} AS JSONB)" if c in ("arguments", "redactions") else f"t.{c}"
            for c in _INSERT_COLUMNS
        ]
        record = ", ".join(f"{c} {t}" for c, t in zip(_INSERT_COLUMNS, types, strict=True))
        recordset = (
            f"INSERT INTO {TOOL.name} ({columns}) SELECT {', '.join(selected)} "
            f"FROM jsonb_to_recordset(CAST(%s AS JSONB)) AS t({record}){tail}"
        )
    return _InsertPlan(
        head=f"INSERT INTO {TOOL.name} ({columns}) VALUES ",
        row=f"({', '.join(marks)})",
        tail=tail,
        converters=converters,
        recordset=recordset,
    )


def _then_iso(processor: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The processor, then ISO 8601 text for a timestamp (the JSON recordset's form)."""

    def convert(value: Any) -> Any:
        value = processor(value)
        return value.isoformat() if isinstance(value, datetime) else value

    return convert


def _load_calls(
    message_ids: Iterable[int], rounds: Iterable[int]
) -> dict[tuple[int, int, int], dict[str, Any]]:
    params = {"message_ids": sorted(message_ids), "rounds": sorted(rounds)}
    rows = db.session.execute(_LOAD_CALLS, params).mappings()
    return {(r["message_id"], r["round_index"], r["sequence_index"]): dict(r) for r in rows}


def _call_conflict(call: PreparedCall, message_label: str, diffs: list[str]) -> Conflict:
    round_index, sequence_index = call.key
    return Conflict(
        f"{call.field}: a different call is already stored for message {message_label!r}, "
        f"round {round_index}, sequence {sequence_index} ({', '.join(diffs)} differ)",
        [
            {
                "field": call.field,
                "message_id": message_label,
                "round_index": round_index,
                "sequence_index": sequence_index,
                "conflicting": diffs,
            }
        ],
    )


def _with_response(stored: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    merged = dict(stored)
    for name in ("response", "response_created_at", "is_error", "response_tokens"):
        merged[name] = new[name]
    merged["response_bytes"] = new["response_bytes"]
    merged["started_at"] = stored["started_at"] or new["started_at"]
    merged["ended_at"] = stored["ended_at"] or new["ended_at"]
    merged["token_method"] = stored["token_method"] or new["token_method"]
    names = list(stored["redactions"] or [])
    names += [n for n in new["redactions"] or [] if n not in names]
    merged["redactions"] = names or None
    return merged


def _insert_calls(
    project_id: int, inserts: list[tuple[int, PreparedCall]]
) -> list[tuple[int, dict[str, Any]]]:
    if not inserts:
        return []
    # A stable order makes concurrent PostgreSQL writers take key locks in the same order.
    inserts.sort(key=lambda item: (item[0], *item[1].key))
    conn = db.session.connection()
    plan = _insert_plan(conn.dialect)
    rows = _insert_values(plan, project_id, inserts)
    returned = []
    if plan.recordset is not None:
        document = compact_json([dict(zip(_INSERT_COLUMNS, row, strict=True)) for row in rows])
        returned = conn.exec_driver_sql(plan.recordset, (document,)).all()
    else:
        for start in range(0, len(rows), _INSERT_CHUNK):
            chunk = rows[start : start + _INSERT_CHUNK]
            values = tuple(chain.from_iterable(chunk))
            returned += conn.exec_driver_sql(plan.statement(len(chunk)), values).all()
    if len(returned) != len(inserts):
        raise RaceLost()
    ids = {(m, r, q): i for i, m, r, q in returned}
    out = []
    for message_id, call in inserts:
        row = dict(call.row, message_id=message_id)
        row["id"] = ids[(message_id, *call.key)]
        out.append((message_id, row))
    return out


_ROW_VALUES = itemgetter(*_ROW_KEYS)


def _insert_values(
    plan: _InsertPlan, project_id: int, inserts: list[tuple[int, PreparedCall]]
) -> list[list[Any]]:
    """Each insert's values in `_INSERT_COLUMNS` order, converted for the driver.

    Only the columns with a converter (the timestamps and the flag) are converted, and each
    distinct value once per request: a batch's calls mostly share their times."""
    converters = plan.converters
    memos: list[dict[Any, Any]] = [{} for _ in converters]
    stamp = new_stamp()
    rows = []
    for message_id, call in inserts:
        row = call.row
        redactions = row["redactions"]
        values = [
            project_id,
            message_id,
            *_ROW_VALUES(row),
            call.arguments_json,
            compact_json(redactions) if redactions else None,
            stamp,
        ]
        for (index, convert), memo in zip(converters, memos, strict=True):
            value = values[index]
            if value is not None:
                converted = memo.get(value, _MISSING)
                if converted is _MISSING:
                    converted = memo[value] = convert(value)
                values[index] = converted
        rows.append(values)
    return rows


_MISSING = object()


def _update_responses(rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    stamp = new_stamp()
    params = [
        {
            "b_id": r["id"],
            "b_response": r["response"],
            "b_response_created_at": r["response_created_at"],
            "b_is_error": r["is_error"],
            "b_response_tokens": r["response_tokens"],
            "b_response_bytes": r["response_bytes"],
            "b_started_at": r["started_at"],
            "b_ended_at": r["ended_at"],
            "b_token_method": r["token_method"],
            "b_redactions": compact_json(r["redactions"]) if r["redactions"] else None,
            "b_stamp": stamp,
        }
        for r in rows
    ]
    db.session.execute(_UPDATE_RESPONSES, params, execution_options={"synchronize_session": False})
