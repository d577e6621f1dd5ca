"""Messages: keyed by (project, external id), stored in bulk, idempotently.

Re-posting a stored message is a no-op; a placeholder made by the MessageTool API is filled in
and attached to its conversation; an `in_progress` assistant message may still change. Anything
else that differs is a `Conflict`. Existing rows are read `FOR UPDATE` (PostgreSQL), so writers
of one message queue up instead of racing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, select, update

from ..db import db
from ..sql import MESSAGE, dialect_insert
from .calls import CallDraft
from .errors import Conflict, Duplicate, RaceLost
from .otlp import OWNED_MESSAGE_PREFIX
from .usage import UsageDraft


@dataclass
class MessageDraft:
    """A message of a request. `None` fields were not given and are not compared."""

    field: str
    external_id: str
    role: str
    content: str | None = None
    created_at: datetime | None = None
    status: str | None = None
    model: str | None = None
    calls: list[CallDraft] = field(default_factory=list)
    usage: list[UsageDraft] = field(default_factory=list)
    # Run status of a new assistant message when none is given (per-round posts: in_progress).
    default_status: str = "completed"
    # Stored by the import API (a new row is marked; an existing row keeps its mark).
    imported: bool = False


_MESSAGE_COLUMNS = (
    MESSAGE.c.id,
    MESSAGE.c.external_id,
    MESSAGE.c.conversation_id,
    MESSAGE.c.role,
    MESSAGE.c.content,
    MESSAGE.c.created_at,
    MESSAGE.c.status,
    MESSAGE.c.model,
    MESSAGE.c.content_tokens,
)


# Built once; FOR UPDATE is left out on SQLite, whose write lock covers the whole database.
_LOCK_MESSAGES = (
    select(*_MESSAGE_COLUMNS)
    .where(
        MESSAGE.c.project_id == bindparam("project_id"),
        MESSAGE.c.external_id.in_(bindparam("external_ids", expanding=True)),
    )
    .order_by(MESSAGE.c.external_id)
    .with_for_update()
)


@cache
def _placeholder_insert(dialect: str) -> Any:
    return (
        dialect_insert(MESSAGE, dialect)
        .values(role="assistant")
        .on_conflict_do_nothing()
        .returning(*_MESSAGE_COLUMNS)
    )


def _lock_messages(project_id: int, external_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    params = {"project_id": project_id, "external_ids": sorted(external_ids)}
    rows = db.session.execute(_LOCK_MESSAGES, params).mappings()
    return {r["external_id"]: dict(r) for r in rows}


# What a write may change on a stored message: the one UPDATE of message rows, by row id, for
# the native write path and the OTLP projector alike. Bind names carry a `b_` prefix: SQLAlchemy
# refuses a bindparam named like a column the statement sets.
_UPDATED_COLUMNS = (
    "conversation_id",
    "role",
    "content",
    "created_at",
    "status",
    "model",
    "content_tokens",
)
_UPDATE_MESSAGE = (
    update(MESSAGE)
    .where(MESSAGE.c.id == bindparam("b_id"))
    .values({name: bindparam(f"b_{name}") for name in _UPDATED_COLUMNS})
)


def update_messages(rows: Iterable[Mapping[str, Any]]) -> None:
    """Write stored messages back in one executemany: each row holds its `id` and the columns
    of `_UPDATED_COLUMNS` (other keys are ignored)."""
    params = [{f"b_{k}": row[k] for k in ("id", *_UPDATED_COLUMNS)} for row in rows]
    if params:
        db.session.execute(
            _UPDATE_MESSAGE, params, execution_options={"synchronize_session": False}
        )


def message_for_tools(
    project_id: int, external_id: str, now: datetime
) -> tuple[dict[str, Any], bool]:
    """The message a MessageTool post attaches to, and whether it was made just now: a
    placeholder is made for an unknown id."""
    found = _lock_messages(project_id, [external_id]).get(external_id)
    made = found is None
    if found is None:
        stmt = _placeholder_insert(db.session.get_bind().dialect.name)
        params = {"project_id": project_id, "external_id": external_id, "created_at": now}
        row = db.session.execute(stmt, params).mappings().first()
        if row is None:
            raise RaceLost()
        found = dict(row)
    if found["role"] != "assistant":
        raise Conflict(
            f"message {external_id!r} is a {found['role']} message; only assistant messages "
            "have tool calls",
            [{"field": "messageId", "message_id": external_id, "role": found["role"]}],
        )
    return found, made


def upsert_messages(
    project_id: int,
    conversation_id: int,
    conversation_label: str,
    drafts: Sequence[MessageDraft],
    now: datetime,
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Store messages (new, placeholder filled, in-progress updated, or identical); by external
    id, with the external ids of those inserted just now.

    Drafts are expected to have distinct external ids (see `check_distinct_ids`).
    """
    stored = _lock_messages(project_id, [d.external_id for d in drafts])
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for draft in drafts:
        row = stored.get(draft.external_id)
        if row is None:
            inserts.append(_new_message_row(project_id, conversation_id, draft, now))
            continue
        changed = _merge_message(row, draft, conversation_id, conversation_label)
        if changed:
            updates.append(row)
    if inserts:
        stmt = (
            dialect_insert(MESSAGE)
            .on_conflict_do_nothing()
            .returning(MESSAGE.c.id, MESSAGE.c.external_id)
        )
        returned = db.session.execute(stmt, inserts).all()
        if len(returned) != len(inserts):
            raise RaceLost()
        ids = {r.external_id: r.id for r in returned}
        for row in inserts:
            row["id"] = ids[row["external_id"]]
            stored[row["external_id"]] = row
    update_messages(updates)
    return stored, {row["external_id"] for row in inserts}


def check_not_otlp_owned(external_id: str, field_path: str) -> None:
    """Messages the OTLP projector wrote are its own: a native write to one is a 409."""
    if external_id.startswith(OWNED_MESSAGE_PREFIX):
        raise Conflict(
            f"{field_path}: message {external_id!r} is owned by OTLP ingestion; it changes "
            "only as its spans arrive",
            [{"field": field_path, "message_id": external_id, "owner": "otlp"}],
        )


def check_distinct_ids(drafts: Sequence[MessageDraft]) -> None:
    seen: dict[str, str] = {}
    for draft in drafts:
        check_not_otlp_owned(draft.external_id, f"{draft.field}.id")
        if draft.external_id in seen:
            raise Duplicate(
                f"{draft.field}.id",
                f"message id {draft.external_id!r} appears twice in this request",
                duplicate_of=seen[draft.external_id],
            )
        seen[draft.external_id] = draft.field


def _default_status(draft: MessageDraft) -> str | None:
    if draft.role != "assistant":
        return None
    return draft.status or draft.default_status


def _new_message_row(
    project_id: int, conversation_id: int, draft: MessageDraft, now: datetime
) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "external_id": draft.external_id,
        "conversation_id": conversation_id,
        "role": draft.role,
        "content": draft.content,
        "created_at": draft.created_at or now,
        "status": _default_status(draft),
        "model": draft.model,
        # Counted later by the token pass (webapp/ingest/token_pass.py), in its own process: a
        # web worker never loads the tokenizer to store a write.
        "content_tokens": None,
        "imported": draft.imported,
    }


def _merge_message(
    row: dict[str, Any], draft: MessageDraft, conversation_id: int, conversation_label: str
) -> bool:
    """Apply `draft` to the stored `row` in place; True when the row changed."""
    if row["conversation_id"] is None:  # a placeholder from the MessageTool API
        if draft.role != "assistant":
            raise Conflict(
                f"{draft.field}: message {draft.external_id!r} already has tool calls, so it "
                "must be an assistant message",
                [{"field": f"{draft.field}.role", "message_id": draft.external_id}],
            )
        row.update(
            conversation_id=conversation_id,
            content=draft.content,
            created_at=draft.created_at or row["created_at"],
            status=_default_status(draft),
            model=draft.model,
            content_tokens=None,  # the token pass counts the new content
        )
        return True
    if row["conversation_id"] != conversation_id:
        raise Conflict(
            f"{draft.field}: message {draft.external_id!r} belongs to another conversation",
            [{"field": f"{draft.field}.id", "message_id": draft.external_id}],
        )
    if row["role"] != draft.role:
        raise _message_conflict(draft, ["role"], conversation_label)
    if row["role"] == "assistant" and row["status"] == "in_progress":
        return _update_in_progress(row, draft)
    diffs = [
        name
        for name in ("content", "status", "model")
        if getattr(draft, name) is not None and getattr(draft, name) != row[name]
    ]
    if diffs:
        raise _message_conflict(draft, diffs, conversation_label)
    return False


def _update_in_progress(row: dict[str, Any], draft: MessageDraft) -> bool:
    changed = False
    for name in ("content", "status", "model"):
        value = getattr(draft, name)
        if value is not None and value != row[name]:
            row[name] = value
            changed = True
    if changed:
        row["content_tokens"] = None  # the token pass counts the new content
    return changed


def _message_conflict(draft: MessageDraft, diffs: list[str], conversation_label: str) -> Conflict:
    return Conflict(
        f"{draft.field}: message {draft.external_id!r} is already stored in conversation "
        f"{conversation_label!r} with a different {', '.join(diffs)} (only an in_progress "
        "assistant message may change)",
        [{"field": draft.field, "message_id": draft.external_id, "conflicting": diffs}],
    )
