"""Database reads behind the charts: a fixed number of statements whatever the amount of data.

Daily series and result sizes read the roll-ups (``webapp.queries.rollups``): whole buckets, and
the rows of a range's partial edges, whatever the number of calls. With a channel filter (a
conversation's attribute, which the roll-ups do not have) they are GROUP BY aggregates over the
rows, as are result-size percentiles of a range of at most ``EXACT_PERCENTILES_MAX_CALLS`` calls
(one window-function query, exact); above, they come from the roll-ups' sketches (approximate).
Conversations for re-send attribution are loaded for any number of conversations in five
queries (the conversations, then ``webapp.queries.histories``' four).
Rows come back as the frozen records of ``webapp.analytics.records``, so the pure code never
touches the session.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import Select, case, func, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..analytics.context import StoredCounts
from ..analytics.filters import ChartFilters
from ..analytics.records import (
    PERCENTILES,
    DailyToolActivity,
    DailyUsage,
    LoadedConversation,
    ResultSizes,
)
from ..analytics.rollups import quantiles
from ..db import db
from ..models import Channel, Conversation, Message, ServiceCall
from ..models import ToolInvocation as T
from ..sql import as_int, day_of
from . import rollups
from .conversations import find_conversations
from .histories import LoadedHistory, load_histories
from .records import ConversationRecord
from .tool_stats import EXACT_PERCENTILES_MAX_CALLS

__all__ = [
    "active_conversation_ids",
    "daily_tool_activity",
    "daily_usage",
    "load_conversations",
    "result_sizes",
]


def _in_channel(project_id: int, channel: str | None) -> list[ColumnElement[bool]]:
    if not channel:
        return []
    return [
        Conversation.channel_id.in_(
            select(Channel.id).where(Channel.project_id == project_id, Channel.name == channel)
        )
    ]


# --- daily series -----------------------------------------------------------------------------


def daily_usage(project_id: int, f: ChartFilters) -> list[DailyUsage]:
    """Reported usage and stored cost of the project's service calls per UTC day."""
    if not f.channel:
        return [
            DailyUsage(
                day=day,
                service_calls=p.service_calls,
                input_tokens=p.input_tokens,
                output_tokens=p.output_tokens,
                cached_tokens=p.cached_tokens,
                cost_usd=p.cost_usd,
                unpriced_calls=p.unpriced,
            )
            for day, p in sorted(rollups.daily_usage_parts(project_id, f.start, f.end).items())
        ]
    return daily_usage_from_rows(project_id, f)


def daily_usage_from_rows(project_id: int, f: ChartFilters) -> list[DailyUsage]:
    """The same from the rows (one GROUP BY): with a channel filter."""
    at = func.coalesce(ServiceCall.created_at, Message.created_at)
    day = day_of(at).label("day")
    stmt = (
        select(
            day,
            func.count().label("calls"),
            func.sum(ServiceCall.input_tokens).label("input_tokens"),
            func.sum(ServiceCall.output_tokens).label("output_tokens"),
            func.sum(ServiceCall.cached_tokens).label("cached_tokens"),
            func.sum(ServiceCall.cost_usd).label("cost_usd"),
            func.sum(case((ServiceCall.cost_usd.is_(None), 1), else_=0)).label("unpriced"),
        )
        .join(Message, Message.id == ServiceCall.message_id)
        .join(Conversation, Conversation.id == Message.conversation_id)
        .where(
            Message.project_id == project_id,
            at >= f.start,
            at < f.end,
            *_in_channel(project_id, f.channel),
        )
        .group_by(day)
        .order_by(day)
    )
    return [
        DailyUsage(
            day=date.fromisoformat(row.day),
            service_calls=as_int(row.calls),
            input_tokens=as_int(row.input_tokens),
            output_tokens=as_int(row.output_tokens),
            cached_tokens=as_int(row.cached_tokens),
            cost_usd=Decimal(row.cost_usd or 0),
            unpriced_calls=as_int(row.unpriced),
        )
        for row in db.session.execute(stmt)
    ]


def _tool_calls_in(project_id: int, f: ChartFilters, stmt: Select[Any]) -> Select[Any]:
    """Restrict a select over tool calls to the filters (period, channel, tool)."""
    stmt = stmt.where(T.project_id == project_id, T.created_at >= f.start, T.created_at < f.end)
    if f.tool:
        stmt = stmt.where(T.function_name == f.tool)
    if f.channel:
        stmt = (
            stmt.join(Message, Message.id == T.message_id)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(*_in_channel(project_id, f.channel))
        )
    return stmt


def daily_tool_activity(project_id: int, f: ChartFilters) -> list[DailyToolActivity]:
    """Calls, errors and result tokens per UTC day and tool."""
    if not f.channel:
        return [
            DailyToolActivity(
                day=d.day,
                function_name=d.function_name,
                calls=d.calls,
                errors=d.errors,
                responses=d.responses,
                result_tokens=d.tokens_sum,
            )
            for d in rollups.daily_tool_parts(project_id, f.start, f.end, f.tool)
        ]
    return daily_tool_activity_from_rows(project_id, f)


def daily_tool_activity_from_rows(project_id: int, f: ChartFilters) -> list[DailyToolActivity]:
    """The same from the rows (one GROUP BY): with a channel filter."""
    day = day_of(T.created_at).label("day")
    stmt = select(
        day,
        T.function_name,
        func.count().label("calls"),
        func.sum(case((T.is_error, 1), else_=0)).label("errors"),
        func.sum(case((T.response.is_not(None), 1), else_=0)).label("responses"),
        func.sum(T.response_tokens).label("result_tokens"),
    ).select_from(T)
    stmt = _tool_calls_in(project_id, f, stmt).group_by(day, T.function_name)
    return [
        DailyToolActivity(
            day=date.fromisoformat(row.day),
            function_name=row.function_name,
            calls=as_int(row.calls),
            errors=as_int(row.errors),
            responses=as_int(row.responses),
            result_tokens=as_int(row.result_tokens),
        )
        for row in db.session.execute(stmt.order_by(day, T.function_name))
    ]


# --- result sizes -----------------------------------------------------------------------------


def result_sizes(project_id: int, f: ChartFilters) -> list[ResultSizes]:
    """Per tool: count, mean, min, max and percentiles of result tokens. Exact from the rows
    with a channel filter or up to EXACT_PERCENTILES_MAX_CALLS calls in the range; else from
    the roll-ups: count and mean exact, the rest from the merged sketches (``approximate``)."""
    if f.channel:
        return result_sizes_from_rows(project_id, f)
    totals = rollups.tool_totals(project_id, f.start, f.end, f.tool, sketches=())
    if sum(t.calls for t in totals.values()) <= EXACT_PERCENTILES_MAX_CALLS:
        return result_sizes_from_rows(project_id, f)
    totals = rollups.tool_totals(project_id, f.start, f.end, f.tool, sketches=("sizes",))
    out = []
    for name, t in sorted(totals.items()):
        if not t.tokens_n or t.sizes.count <= 0:
            continue
        low, high, *middle = (
            round(v or 0) for v in quantiles(t.sizes, (0.0, 1.0, *(p / 100 for p in PERCENTILES)))
        )
        out.append(
            ResultSizes(
                function_name=name,
                results=t.tokens_n,
                mean=t.tokens_sum / t.tokens_n,
                minimum=low,
                maximum=high,
                percentiles=dict(zip(PERCENTILES, middle, strict=True)),
                approximate=True,
            )
        )
    return out


def result_sizes_from_rows(project_id: int, f: ChartFilters) -> list[ResultSizes]:
    """Per tool: count, mean, min, max and percentiles of result tokens (one query).

    Only the rows at the wanted ranks leave the database, whatever the number of results.
    """
    base = select(T.function_name, T.response_tokens.label("tokens")).where(
        T.response.is_not(None), T.response_tokens.is_not(None)
    )
    sizes = _tool_calls_in(project_id, f, base.select_from(T)).subquery()
    ranked = select(
        sizes.c.function_name,
        sizes.c.tokens,
        func.row_number()
        .over(partition_by=sizes.c.function_name, order_by=sizes.c.tokens)
        .label("rank"),
        func.count().over(partition_by=sizes.c.function_name).label("n"),
        func.avg(sizes.c.tokens).over(partition_by=sizes.c.function_name).label("mean"),
    ).subquery()
    wanted = [ranked.c.rank == 1, ranked.c.rank == ranked.c.n]
    wanted += [ranked.c.rank == (ranked.c.n * p + 99) // 100 for p in PERCENTILES]
    rows = db.session.execute(
        select(ranked).where(or_(*wanted)).order_by(ranked.c.function_name, ranked.c.rank)
    )
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        n = as_int(row.n)
        entry = out.setdefault(
            row.function_name,
            {"results": n, "mean": float(row.mean), "by_rank": {}},
        )
        entry["by_rank"][as_int(row.rank)] = as_int(row.tokens)
    return [
        ResultSizes(
            function_name=name,
            results=e["results"],
            mean=e["mean"],
            minimum=e["by_rank"][1],
            maximum=e["by_rank"][e["results"]],
            percentiles={p: e["by_rank"][math.ceil(p * e["results"] / 100)] for p in PERCENTILES},
        )
        for name, e in out.items()
    ]


# --- conversations for attribution and the context chart ------------------------------------


def active_conditions(project_id: int, f: ChartFilters) -> list[ColumnElement[bool]]:
    """The conversations the period's charts cover: activity in the period, in the channel,
    and with a tool filter only those that called that tool (the replayed charts and the
    stored tool costs select them alike)."""
    conditions: list[ColumnElement[bool]] = [
        Conversation.project_id == project_id,
        Conversation.updated_at >= f.start,
        Conversation.created_at < f.end,
        *_in_channel(project_id, f.channel),
    ]
    if f.tool:
        conditions.append(
            Conversation.id.in_(
                select(Message.conversation_id)
                .join(T, T.message_id == Message.id)
                .where(T.project_id == project_id, T.function_name == f.tool)
            )
        )
    return conditions


def active_conversation_ids(project_id: int, f: ChartFilters, limit: int) -> tuple[list[int], int]:
    """Conversations with activity in the period (most recent first, at most ``limit``), and how
    many there are in all. With a tool filter, only conversations that called that tool."""
    total = func.count().over().label("total")
    rows = db.session.execute(
        select(Conversation.id, total)
        .where(*active_conditions(project_id, f))
        .order_by(Conversation.updated_at.desc(), Conversation.id.desc())
        .limit(limit)
    ).all()
    return [r.id for r in rows], (as_int(rows[0].total) if rows else 0)


def load_conversations(project_id: int, ids: Sequence[int]) -> list[LoadedConversation]:
    """Conversations of the project among ``ids`` (others are ignored), in five queries: theirs
    (``webapp.queries.conversations``), then the four of ``webapp.queries.histories``."""
    conversations = find_conversations(project_id, ids)
    histories = load_histories(conversations, tokens="row")
    return [_loaded(c, histories[c.id]) for c in conversations]


def _loaded(conversation: ConversationRecord, loaded: LoadedHistory) -> LoadedConversation:
    return LoadedConversation(
        id=conversation.id,
        external_id=conversation.external_id,
        title=conversation.title,
        freshness_seconds=conversation.freshness_seconds,
        history=loaded.history,
        counts=StoredCounts(
            arguments=loaded.argument_tokens,
            results=loaded.result_tokens,
            messages=loaded.message_tokens,
        ),
        costs=loaded.costs,
    )
