"""Keeping the tool-cost roll-up (``project_tool_cost``) in step with the stored tool costs it
sums (``conversation_tool_cost``, one row per conversation, tool and hour).

Those rows are written in two ways only: a conversation's are replaced whole
(``webapp.services.attribution_store.store``), and they go with their conversation by cascade
(a delete, a purge, the demo's reload, the OTLP projector's drop of a conversation it emptied)
or with their project (the roll-up's rows go by the same cascade). A DELETE of conversations
through the session is seen before it runs (a ``do_orm_execute`` listener, so that no path can
leave their costs behind; a raw SQL text is not). Each adds its delta per (project, hour, tool)
at once, in the caller's transaction: one grouped SELECT of the rows about to go, one
upsert that adds (in key order, so that concurrent writers on PostgreSQL lock alike), one
DELETE of the rows that sum no piece any more. :func:`recompute` is the drift test's oracle
(the migration fills the table with the same sums in SQL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, event, func, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import ORMExecuteState, Session

from ..db import db
from ..models import Conversation, ConversationToolCost, ProjectToolCost

R = ConversationToolCost.__table__
ROLLUP = ProjectToolCost.__table__
CONVERSATION = Conversation.__table__
# What a row adds: the summed columns, each row one piece.
SUMS = (
    "results",
    "result_tokens",
    "sends",
    "resent_input_tokens",
    "unpriced_input_tokens",
    "cost_femto",
    "estimated_femto",
)
_CHUNK = 400

Key = tuple[int, datetime, str]  # project, hour, function name


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _grouped(*conditions: Any, executor: Any = None) -> dict[Key, list[int]]:
    """The rows of conversation_tool_cost matching ``conditions``, summed per key: [pieces,
    *SUMS]."""
    ex = executor if executor is not None else db.session
    rows = ex.execute(
        select(
            R.c.project_id,
            R.c.bucket,
            R.c.function_name,
            func.count().label("pieces"),
            *[func.sum(R.c[n]).label(n) for n in SUMS],
        )
        .where(*conditions)
        .group_by(R.c.project_id, R.c.bucket, R.c.function_name)
    )
    return {
        (r.project_id, _aware(r.bucket), r.function_name): [
            int(r.pieces),
            *(int(getattr(r, n) or 0) for n in SUMS),
        ]
        for r in rows
    }


def removed(conversation_ids: Any) -> dict[Key, list[int]]:
    """What taking away the stored rows of these conversations (a list or a SELECT of ids)
    subtracts from the roll-up."""
    added = _grouped(R.c.conversation_id.in_(conversation_ids))
    return {key: [-v for v in value] for key, value in added.items()}


def add_rows(
    deltas: dict[Key, list[int]], rows: Iterable[Mapping[str, Any]], sign: int = 1
) -> None:
    """Add what new conversation_tool_cost rows (as inserted) add to ``deltas``."""
    for row in rows:
        key = (row["project_id"], _aware(row["bucket"]), row["function_name"])
        mine = deltas.setdefault(key, [0] * (1 + len(SUMS)))
        mine[0] += sign
        for i, n in enumerate(SUMS, 1):
            mine[i] += sign * int(row[n])


def apply(deltas: Mapping[Key, list[int]]) -> None:
    """Add ``deltas`` to the roll-up in the session's transaction; drop the rows left with no
    piece."""
    keys = sorted(k for k, v in deltas.items() if any(v))
    if not keys:
        return
    dialect = db.session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    for start in range(0, len(keys), _CHUNK):
        chunk = keys[start : start + _CHUNK]
        values = [
            {
                "project_id": k[0],
                "bucket": k[1],
                "function_name": k[2],
                "pieces": deltas[k][0],
                **{n: deltas[k][i] for i, n in enumerate(SUMS, 1)},
            }
            for k in chunk
        ]
        stmt = insert(ROLLUP).values(values)
        db.session.execute(
            stmt.on_conflict_do_update(
                index_elements=["project_id", "bucket", "function_name"],
                set_={n: ROLLUP.c[n] + stmt.excluded[n] for n in ("pieces", *SUMS)},
            )
        )
    gone = [k for k in keys if deltas[k][0] < 0]
    for start in range(0, len(gone), _CHUNK):
        chunk = gone[start : start + _CHUNK]
        db.session.execute(
            delete(ROLLUP).where(
                tuple_(ROLLUP.c.project_id, ROLLUP.c.bucket, ROLLUP.c.function_name).in_(chunk),
                ROLLUP.c.pieces <= 0,
            )
        )


def remove_conversations(conversation_ids: Any) -> None:
    """Before deleting conversations (their stored tool costs go by cascade): subtract them.
    ``conversation_ids``: a list or a SELECT of ids."""
    apply(removed(conversation_ids))


@event.listens_for(Session, "do_orm_execute")
def _before_conversation_delete(state: ORMExecuteState) -> None:
    statement = state.statement
    table = getattr(statement, "table", None)
    if not state.is_delete or getattr(table, "name", None) != CONVERSATION.name:
        return
    if state.session is not db.session():  # pragma: no cover - only the app's session writes
        return
    where = statement.whereclause  # type: ignore[attr-defined]
    ids = select(CONVERSATION.c.id)
    ids = ids if where is None else ids.where(where)
    if state.session.get_bind().dialect.name == "postgresql":
        # Locked first (a delete or purge holds them already), so that a store of their costs
        # running now commits before their rows are read, or finds them gone.
        state.session.execute(ids.order_by(CONVERSATION.c.id).with_for_update())
    remove_conversations(ids)


def recompute(executor: Any = None) -> dict[Key, list[int]]:
    """Every roll-up row as conversation_tool_cost says it should be: [pieces, *SUMS]."""
    return _grouped(executor=executor)


def stored(executor: Any = None) -> dict[Key, list[int]]:
    """The roll-up as stored, in the shape of :func:`recompute`."""
    ex = executor if executor is not None else db.session
    rows = ex.execute(select(ROLLUP))
    return {
        (r.project_id, _aware(r.bucket), r.function_name): [
            int(r.pieces),
            *(int(getattr(r, n)) for n in SUMS),
        ]
        for r in rows
    }
