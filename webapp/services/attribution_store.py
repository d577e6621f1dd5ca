"""The stored "which tools make the agent expensive": each conversation's re-send attribution
per tool and hour (``conversation_tool_cost``), and the revision it was computed from
(``conversation_attribution``).

The attribution of a conversation depends on all of it (a result is paid for by every later
call that re-sends it) and on token counts the token pass fills in later, so it is recomputed
whole, never patched. Writes do nothing for it: every write that changes what the replay reads
bumps ``conversation.revision``, and a stored attribution whose revision is not the
conversation's is stale; so is one computed with other price overrides of the project
(``prices``, a digest of them). The token pass marks stale (revision -1,
:func:`webapp.ingest.attribution.mark_counted`) the conversations computed while some of their
counts were pending. A delete or purge of a conversation takes its rows by cascade.

The chart (:func:`webapp.views.charts.project_attribution`) sums the stored pieces of the whole
hours in its range in SQL (from their per-project roll-up, :func:`stored_totals`), and replays
in Python at most ``INLINE_MAX`` conversations: the stale ones (storing what it computed, so
the next request reads it) and those active in the partial hour where a range preset starts
(the rows cannot split an hour). Past that bound the chart says which figures are pending or
approximate. :func:`refresh_stale` brings a project
up to date in batches (the bench's loader, the tests).

The rule itself is pure (``webapp.analytics.tool_costs.attribution_by_hour``); the hours of a
range add up to the range's attribution. Costs are stored in femto-USD, rounded down.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, literal, or_, select, union_all

from ..analytics.attribution import ToolAttribution
from ..analytics.context import ConversationContext, conversation_context
from ..analytics.filters import ChartFilters
from ..analytics.records import LoadedConversation
from ..analytics.tool_costs import (
    InputPrices,
    attribution_by_hour,
    billed_inputs,
    femto,
    from_femto,
)
from ..background import direct
from ..db import db
from ..ingest import tool_cost_rollup
from ..ingest.transaction import Write, run_write
from ..models import (
    Conversation,
    ConversationAttribution,
    ConversationToolCost,
    Message,
    ProjectToolCost,
)
from ..models import ToolInvocation as T
from ..pricing import PriceOverride
from ..queries.analytics import active_conditions, load_conversations
from ..sql import as_int
from ..tokens import count_tokens

__all__ = [
    "INLINE_MAX",
    "Computed",
    "compute",
    "edge_conversations",
    "prices_key",
    "refresh",
    "refresh_stale",
    "stale_conversations",
    "store",
    "stored_totals",
]

# Conversations a chart request replays at most (stale ones, then those of a partial hour).
INLINE_MAX = 20
HOUR = timedelta(hours=1)
C = Conversation
A = ConversationAttribution
R = ConversationToolCost
P = ProjectToolCost
_SUMS = (
    "results",
    "result_tokens",
    "sends",
    "resent_input_tokens",
    "unpriced_input_tokens",
)


@dataclass(frozen=True, slots=True)
class Computed:
    """One conversation's pieces, and the revision and pending counts they were read at."""

    conversation_id: int
    revision: int
    pending_counts: bool
    prices: str
    pieces: dict[datetime, dict[str, ToolAttribution]]


def prices_key(overrides: Mapping[str, PriceOverride]) -> str:
    """A digest of the project's price overrides, which the stored costs were computed with."""
    return hashlib.sha256(repr(sorted(overrides.items())).encode()).hexdigest()[:32]


def prices_for(
    overrides: Mapping[str, PriceOverride], loaded: Iterable[LoadedConversation]
) -> InputPrices:
    providers = {
        (c.message_row_id, c.round_index): c.provider for conv in loaded for c in conv.costs
    }
    return InputPrices(overrides, providers)


def context_of(conv: LoadedConversation) -> ConversationContext:
    """As the chart replays: per-run persistence, the conversation's freshness window."""
    return conversation_context(
        conv.history,
        conv.counts,
        count=count_tokens,
        freshness_seconds=conv.freshness_seconds,
        persistence="per-run",
    )


# --- which conversations --------------------------------------------------------------------


def stale_conversations(
    project_id: int, f: ChartFilters | None, limit: int, prices: str
) -> tuple[list[tuple[int, int]], int]:
    """(id, revision) of the covered conversations whose stored attribution is missing or out
    of date (another revision, other price overrides), most recently active first, at most
    ``limit``; and how many there are."""
    conditions = active_conditions(project_id, f) if f else [C.project_id == project_id]
    total = func.count().over().label("total")
    rows = db.session.execute(
        select(C.id, C.revision, total)
        .outerjoin(A, A.conversation_id == C.id)
        .where(
            *conditions,
            or_(A.conversation_id.is_(None), A.revision != C.revision, A.prices != prices),
        )
        .order_by(C.updated_at.desc(), C.id.desc())
        .limit(limit)
    ).all()
    return [(r.id, as_int(r.revision)) for r in rows], (as_int(rows[0].total) if rows else 0)


def partial_hour(f: ChartFilters) -> datetime | None:
    """The hour the range starts in, when it starts inside it."""
    start = f.start.astimezone(UTC)
    hour = start.replace(minute=0, second=0, microsecond=0)
    return hour if hour != start else None


def edge_conversations(
    project_id: int, f: ChartFilters, hour: datetime, exclude: Sequence[int], limit: int
) -> tuple[list[int], int]:
    """Covered conversations with stored pieces in ``hour`` (not in ``exclude``), most recently
    active first, at most ``limit``; and how many there are."""
    total = func.count().over().label("total")
    rows = db.session.execute(
        select(C.id, total)
        .where(
            *active_conditions(project_id, f),
            C.id.not_in(exclude) if exclude else literal(True),
            C.id.in_(select(R.conversation_id).where(R.project_id == project_id, R.bucket == hour)),
        )
        .order_by(C.updated_at.desc(), C.id.desc())
        .limit(limit)
    ).all()
    return [r.id for r in rows], (as_int(rows[0].total) if rows else 0)


# --- computing and storing ------------------------------------------------------------------


def pending_counts(conversation_ids: Sequence[int]) -> set[int]:
    """Those of the conversations with a token count the token pass has yet to fill (a tool
    response or a message content), which the replay counts itself meanwhile."""
    if not conversation_ids:
        return set()
    calls = (
        select(Message.conversation_id)
        .join(T, T.message_id == Message.id)
        .where(
            Message.conversation_id.in_(conversation_ids),
            T.response.is_not(None),
            T.response_tokens.is_(None),
        )
    )
    messages = select(Message.conversation_id).where(
        Message.conversation_id.in_(conversation_ids),
        Message.content.is_not(None),
        Message.content != "",
        Message.content_tokens.is_(None),
    )
    return set(db.session.scalars(union_all(calls, messages)))


def compute(
    project_id: int,
    revisions: Mapping[int, int],
    overrides: Mapping[str, PriceOverride],
    loaded: Sequence[LoadedConversation] | None = None,
    contexts: Mapping[int, ConversationContext] | None = None,
) -> list[Computed]:
    """The pieces of the conversations of ``revisions`` (id -> revision read before them);
    ``contexts``: their :func:`context_of` by id, when the caller has made them already."""
    ids = sorted(revisions)
    if loaded is None:
        loaded = load_conversations(project_id, ids)
    pending = pending_counts(ids)
    prices = prices_for(overrides, loaded)
    key = prices_key(overrides)
    contexts = contexts or {}
    return [
        Computed(
            conv.id,
            revisions[conv.id],
            conv.id in pending,
            key,
            attribution_by_hour(
                contexts.get(conv.id) or context_of(conv),
                prices,
                billed_inputs(conv.history, conv.costs, prices),
            ),
        )
        for conv in loaded
        if conv.id in revisions
    ]


def _rows(project_id: int, computed: Computed) -> list[dict[str, Any]]:
    return [
        {
            "project_id": project_id,
            "conversation_id": computed.conversation_id,
            "bucket": hour,
            "function_name": name,
            **{n: getattr(a, n) for n in _SUMS},
            "cost_femto": femto(a.attributed_cost_usd),
            "estimated_femto": femto(a.estimated_cost_usd),
        }
        for hour, part in computed.pieces.items()
        for name, a in part.items()
    ]


def store(project_id: int, computed: Sequence[Computed]) -> None:
    """Replace the stored pieces of these conversations (in the caller's write transaction).
    A conversation deleted since is skipped; one whose counts the token pass filled since it
    was read is stored as stale (revision -1)."""
    if not computed:
        return
    ids = sorted(c.conversation_id for c in computed)
    # Held (FOR KEY SHARE on PostgreSQL, as writers appending hold them) until the commit, so
    # that a delete does not take the rows whose pieces the roll-up loses here as well.
    existing = set(
        db.session.scalars(
            select(C.id)
            .where(C.id.in_(ids))
            .order_by(C.id)
            .with_for_update(read=True, key_share=True)
        )
    )
    pending_now = pending_counts(ids)
    deltas = tool_cost_rollup.removed(ids)
    db.session.execute(delete(R).where(R.conversation_id.in_(ids)))
    db.session.execute(delete(A).where(A.conversation_id.in_(ids)))
    states, rows = [], []
    for c in computed:
        if c.conversation_id not in existing:
            continue
        counted_since = c.pending_counts and c.conversation_id not in pending_now
        states.append(
            {
                "conversation_id": c.conversation_id,
                "project_id": project_id,
                "revision": -1 if counted_since else c.revision,
                "pending_counts": c.pending_counts,
                "prices": c.prices,
            }
        )
        rows.extend(_rows(project_id, c))
    if states:
        db.session.execute(A.__table__.insert(), states)
    for start in range(0, len(rows), 2000):
        db.session.execute(R.__table__.insert(), rows[start : start + 2000])
    tool_cost_rollup.add_rows(deltas, rows)
    tool_cost_rollup.apply(deltas)


def refresh(
    project_id: int,
    revisions: Mapping[int, int],
    overrides: Mapping[str, PriceOverride],
    compute_in: Callable[..., Any] = direct,
) -> None:
    """Compute (in a read of its own, through ``compute_in``: the background refresher runs
    the replays in its lane at the lowest priority) and store (in a write transaction of its
    own, in this thread)."""
    db.session.commit()
    computed = compute_in(compute, project_id, revisions, overrides)
    db.session.commit()
    run_write(Write(store, (project_id, computed)))


def refresh_stale(project_id: int, overrides: Mapping[str, PriceOverride], batch: int = 200) -> int:
    """Bring every stored attribution of the project up to date; how many were computed. Stops
    when a batch comes back unchanged (a conversation the loader cannot read, or one the token
    pass keeps counting), which the chart then replays."""
    done, previous = 0, None
    while True:
        stale, _total = stale_conversations(project_id, None, batch, prices_key(overrides))
        if not stale or stale == previous:
            db.session.commit()
            return done
        refresh(project_id, dict(stale), overrides)
        done += len(stale)
        previous = stale


# --- reading ----------------------------------------------------------------------------------


def stored_totals(
    project_id: int, f: ChartFilters, exclude: Sequence[int], hours_from: datetime
) -> dict[str, ToolAttribution]:
    """Per tool, the stored pieces of the covered conversations (not in ``exclude``) in the
    hours from ``hours_from`` to the end of the range, summed, in one statement.

    Whole hours of the range are read from the roll-up (``project_tool_cost``: as many rows
    for a million calls as for a thousand), less the pieces of the excluded conversations and
    of those without activity in the range (calls stamped by their agent outside the server's
    times); the rows of conversation_tool_cost are read for what it cannot say: a channel's
    conversations, and a partial first hour that counts whole (``hours_from`` before the
    range starts, where a conversation is covered by its activity in the range)."""
    if f.channel:
        parts = [_piece_rows(project_id, f, exclude, hours_from, f.end)]
    else:
        parts = []
        whole_from = hours_from
        if hours_from < f.start:
            whole_from = hours_from + HOUR
            parts.append(_piece_rows(project_id, f, exclude, hours_from, min(whole_from, f.end)))
        rollup = [P.project_id == project_id, P.bucket >= whole_from, P.bucket < f.end]
        in_range = [R.bucket >= whole_from, R.bucket < f.end]
        if f.tool:
            rollup.append(P.function_name == f.tool)
            in_range.append(R.function_name == f.tool)
        summed = [getattr(P, n) for n in tool_cost_rollup.SUMS]
        parts.append(select(P.function_name, P.pieces, *summed).where(*rollup))
        if exclude:
            parts.append(_signed(R, -1).where(R.conversation_id.in_(exclude), *in_range))
        # From the project's conversations idle before the range (by their index) or made
        # after it, each one's rows of the range by (conversation_id, bucket).
        parts.append(
            _signed(R, -1)
            .join(C, C.id == R.conversation_id)
            .where(
                C.project_id == project_id,
                or_(C.updated_at < f.start, C.created_at >= f.end),
                *in_range,
            )
        )
    rows = union_all(*parts).subquery() if len(parts) > 1 else parts[0].subquery()
    sums = [func.sum(rows.c[n]).label(n) for n in ("pieces", *tool_cost_rollup.SUMS)]
    out = {}
    for row in db.session.execute(
        select(rows.c.function_name, *sums).group_by(rows.c.function_name)
    ):
        if as_int(row.pieces) <= 0:
            continue  # every piece of the tool taken away again
        a = ToolAttribution(row.function_name)
        for n in _SUMS:
            setattr(a, n, as_int(getattr(row, n)))
        a.attributed_cost_usd = from_femto(as_int(row.cost_femto))
        a.estimated_cost_usd = from_femto(as_int(row.estimated_femto))
        out[row.function_name] = a
    return out


def _signed(table: Any, sign: int) -> Any:
    """The rows of conversation_tool_cost as one piece each, with their sums times ``sign``."""
    return select(
        table.function_name,
        literal(sign).label("pieces"),
        *[(getattr(table, n) * sign).label(n) for n in tool_cost_rollup.SUMS],
    )


def _piece_rows(
    project_id: int, f: ChartFilters, exclude: Sequence[int], start: datetime, end: datetime
) -> Any:
    """The rows of the covered conversations (not in ``exclude``) in [start, end)."""
    conditions = [
        *active_conditions(project_id, f),
        R.project_id == project_id,
        R.bucket >= start,
        R.bucket < end,
    ]
    if exclude:
        conditions.append(R.conversation_id.not_in(exclude))
    if f.tool:
        conditions.append(R.function_name == f.tool)
    return _signed(R, 1).join(C, C.id == R.conversation_id).where(*conditions)
