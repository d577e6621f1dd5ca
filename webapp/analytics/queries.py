"""Database reads behind the charts: a fixed number of statements whatever the amount of data.

Daily series are GROUP BY aggregates; the result-size distribution is one window-function query;
conversations for re-send attribution are loaded for any number of conversations in five queries
(conversations, messages, tool calls, service calls, tool definitions) and grouped in Python.
Rows come back as small frozen records, so the pure code never touches the session.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import Select, case, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..db import db
from ..models import Channel, Conversation, Message, Project, ServiceCall, ToolDefinition
from ..models import ToolInvocation as T
from ..replay.history import History
from ..replay.history import Message as HistoryMessage
from ..replay.history import ServiceCall as HistoryServiceCall
from ..replay.history import ToolCall as HistoryToolCall
from ..replay.history import ToolDefinition as HistoryToolDefinition
from .context import StoredCounts
from .filters import ChartFilters

__all__ = [
    "PERCENTILES",
    "DailyToolActivity",
    "DailyUsage",
    "LoadedConversation",
    "ResultSizes",
    "ServiceCallCost",
    "active_conversation_ids",
    "channel_names",
    "daily_tool_activity",
    "daily_usage",
    "load_conversations",
    "project_by_id",
    "project_by_slug",
    "result_sizes",
    "tool_names",
]

PERCENTILES = (25, 50, 75, 90)


def _int(value: Any) -> int:
    """SUM() of no rows is NULL, and PostgreSQL returns Decimal for SUM of integers."""
    return int(value or 0)


def _day_of(column: Any) -> ColumnElement[str]:
    """The UTC day of a timestamp column as 'YYYY-MM-DD' text, on both databases."""
    if db.engine.dialect.name == "sqlite":
        return func.date(column)  # stored as naive UTC text
    return func.to_char(func.timezone("UTC", column), "YYYY-MM-DD")


def _in_channel(project_id: int, channel: str | None) -> list[ColumnElement[bool]]:
    if not channel:
        return []
    return [
        Conversation.channel_id.in_(
            select(Channel.id).where(Channel.project_id == project_id, Channel.name == channel)
        )
    ]


# --- the project ------------------------------------------------------------------------------


def project_by_id(project_id: int) -> Project | None:
    return db.session.get(Project, project_id)


def project_by_slug(slug: str) -> Project | None:
    return db.session.scalar(select(Project).where(Project.slug == slug))


def channel_names(project_id: int) -> list[str]:
    return list(
        db.session.scalars(
            select(Channel.name).where(Channel.project_id == project_id).order_by(Channel.name)
        )
    )


def tool_names(project_id: int) -> list[str]:
    """Every function name the project has called (uses the (project, function) index)."""
    return list(
        db.session.scalars(
            select(T.function_name)
            .where(T.project_id == project_id)
            .group_by(T.function_name)
            .order_by(T.function_name)
        )
    )


# --- daily series -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DailyUsage:
    day: date
    service_calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: Decimal
    unpriced_calls: int  # service calls without a stored cost (unknown model or usage)


def daily_usage(project_id: int, f: ChartFilters) -> list[DailyUsage]:
    """Reported usage and stored cost of the project's service calls per UTC day (one query)."""
    at = func.coalesce(ServiceCall.created_at, Message.created_at)
    day = _day_of(at).label("day")
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
            service_calls=_int(row.calls),
            input_tokens=_int(row.input_tokens),
            output_tokens=_int(row.output_tokens),
            cached_tokens=_int(row.cached_tokens),
            cost_usd=Decimal(row.cost_usd or 0),
            unpriced_calls=_int(row.unpriced),
        )
        for row in db.session.execute(stmt)
    ]


@dataclass(frozen=True, slots=True)
class DailyToolActivity:
    day: date
    function_name: str
    calls: int
    errors: int
    responses: int
    result_tokens: int


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
    """Calls, errors and result tokens per UTC day and tool (one query)."""
    day = _day_of(T.created_at).label("day")
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
            calls=_int(row.calls),
            errors=_int(row.errors),
            responses=_int(row.responses),
            result_tokens=_int(row.result_tokens),
        )
        for row in db.session.execute(stmt.order_by(day, T.function_name))
    ]


# --- result sizes -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResultSizes:
    """Distribution of one tool's result sizes in tokens (nearest-rank percentiles)."""

    function_name: str
    results: int
    mean: float
    minimum: int
    maximum: int
    percentiles: dict[int, int] = field(default_factory=dict)


def result_sizes(project_id: int, f: ChartFilters) -> list[ResultSizes]:
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
        n = _int(row.n)
        entry = out.setdefault(
            row.function_name,
            {"results": n, "mean": float(row.mean), "by_rank": {}},
        )
        entry["by_rank"][_int(row.rank)] = _int(row.tokens)
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


@dataclass(frozen=True, slots=True)
class ServiceCallCost:
    message_row_id: int
    round_index: int
    provider: str | None
    cost_usd: Decimal | None
    price_source: str | None
    price_version: str | None


@dataclass(frozen=True, slots=True)
class LoadedConversation:
    """A conversation as the analytics need it: replay input, stored counts, stored costs."""

    id: int
    external_id: str
    title: str
    freshness_seconds: int | None  # channel override, else the project's window
    history: History
    counts: StoredCounts
    costs: tuple[ServiceCallCost, ...]


def active_conversation_ids(project_id: int, f: ChartFilters, limit: int) -> tuple[list[int], int]:
    """Conversations with activity in the period (most recent first, at most ``limit``), and how
    many there are in all. With a tool filter, only conversations that called that tool."""
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
    total = func.count().over().label("total")
    rows = db.session.execute(
        select(Conversation.id, total)
        .where(*conditions)
        .order_by(Conversation.updated_at.desc(), Conversation.id.desc())
        .limit(limit)
    ).all()
    return [r.id for r in rows], (_int(rows[0].total) if rows else 0)


def _list_like(column: Any) -> ColumnElement[Any]:
    """The text only when it may be a sources list (source compaction reads those); other
    results stay in the database, their stored token count is what the charts need."""
    first = func.substr(func.ltrim(column, " \t\r\n"), 1, 1)
    return case((first == literal("["), column), else_=None)


def _conversation_rows(project_id: int, ids: Sequence[int]) -> list[Any]:
    return list(
        db.session.execute(
            select(
                Conversation.id,
                Conversation.external_id,
                Conversation.title,
                Conversation.system_prompt,
                Channel.name.label("channel"),
                func.coalesce(Channel.freshness_seconds, Project.freshness_seconds).label(
                    "freshness"
                ),
            )
            .join(Project, Project.id == Conversation.project_id)
            .outerjoin(Channel, Channel.id == Conversation.channel_id)
            .where(Conversation.project_id == project_id, Conversation.id.in_(ids))
        )
    )


def _messages(ids: Sequence[int]) -> dict[int, list[Any]]:
    rows = db.session.execute(
        select(
            Message.id,
            Message.conversation_id,
            Message.external_id,
            Message.role,
            Message.content,
            Message.created_at,
            Message.status,
            Message.model,
            Message.content_tokens,
        )
        .where(Message.conversation_id.in_(ids))
        .order_by(Message.created_at, Message.id)
    )
    grouped: dict[int, list[Any]] = defaultdict(list)
    for row in rows:
        grouped[row.conversation_id].append(row)
    return grouped


def _calls(ids: Sequence[int]) -> tuple[dict[int, list[HistoryToolCall]], dict[int, Any]]:
    """Tool calls by message row id, and their stored token counts by call row id."""
    rows = db.session.execute(
        select(
            T.id,
            T.message_id,
            T.external_tool_call_id,
            T.function_name,
            T.arguments,
            T.round_index,
            T.sequence_index,
            T.created_at,
            (T.response.is_not(None)).label("has_response"),
            _list_like(T.response).label("list_response"),
            T.response_created_at,
            T.is_error,
            T.redactions,
            T.arguments_tokens,
            T.response_tokens,
            T.response_bytes,
        )
        .join(Message, Message.id == T.message_id)
        .where(Message.conversation_id.in_(ids))
        .order_by(T.message_id, T.round_index, T.sequence_index)
    )
    calls: dict[int, list[HistoryToolCall]] = defaultdict(list)
    counts: dict[int, Any] = {}
    for row in rows:
        response = None
        if row.has_response:
            response = row.list_response if row.list_response is not None else ""
        calls[row.message_id].append(
            HistoryToolCall(
                row_id=row.id,
                external_id=row.external_tool_call_id,
                function_name=row.function_name,
                arguments=row.arguments,
                round_index=row.round_index,
                sequence_index=row.sequence_index,
                created_at=row.created_at,
                response=response,
                response_created_at=row.response_created_at,
                is_error=row.is_error,
                redacted=bool(row.redactions),
            )
        )
        result_tokens = row.response_tokens
        if result_tokens is None and row.has_response and row.response_bytes is not None:
            # Ingested without a count: a quarter of its size stands in (the text stays put).
            result_tokens = math.ceil(row.response_bytes / 4)
        counts[row.id] = (row.arguments_tokens, result_tokens)
    return calls, counts


def _service_calls(
    ids: Sequence[int],
) -> tuple[dict[int, list[HistoryServiceCall]], list[Any]]:
    rows = list(
        db.session.execute(
            select(
                ServiceCall.message_id,
                ServiceCall.round_index,
                ServiceCall.model,
                ServiceCall.provider,
                ServiceCall.input_tokens,
                ServiceCall.output_tokens,
                ServiceCall.cached_tokens,
                ServiceCall.created_at,
                ServiceCall.cost_usd,
                ServiceCall.price_source,
                ServiceCall.price_version,
                Message.conversation_id,
            )
            .join(Message, Message.id == ServiceCall.message_id)
            .where(Message.conversation_id.in_(ids))
            .order_by(ServiceCall.message_id, ServiceCall.round_index)
        )
    )
    usage: dict[int, list[HistoryServiceCall]] = defaultdict(list)
    for row in rows:
        usage[row.message_id].append(
            HistoryServiceCall(
                round_index=row.round_index,
                model=row.model,
                input_tokens=row.input_tokens,
                output_tokens=row.output_tokens,
                cached_tokens=row.cached_tokens,
                created_at=row.created_at,
            )
        )
    return usage, rows


def _definitions(ids: Sequence[int]) -> dict[int, list[HistoryToolDefinition]]:
    rows = db.session.execute(
        select(ToolDefinition)
        .where(ToolDefinition.conversation_id.in_(ids))
        .order_by(ToolDefinition.conversation_id, ToolDefinition.name)
    ).scalars()
    grouped: dict[int, list[HistoryToolDefinition]] = defaultdict(list)
    for d in rows:
        grouped[d.conversation_id].append(
            HistoryToolDefinition(d.name, d.description, d.parameters)
        )
    return grouped


def load_conversations(project_id: int, ids: Sequence[int]) -> list[LoadedConversation]:
    """Conversations of the project among ``ids`` (others are ignored), in five queries."""
    if not ids:
        return []
    conversations = _conversation_rows(project_id, ids)
    ids = [c.id for c in conversations]
    if not ids:
        return []
    messages = _messages(ids)
    calls, call_counts = _calls(ids)
    usage, usage_rows = _service_calls(ids)
    definitions = _definitions(ids)
    costs: dict[int, list[ServiceCallCost]] = defaultdict(list)
    for row in usage_rows:
        costs[row.conversation_id].append(
            ServiceCallCost(
                row.message_id,
                row.round_index,
                row.provider,
                None if row.cost_usd is None else Decimal(row.cost_usd),
                row.price_source,
                row.price_version,
            )
        )
    loaded = []
    for c in conversations:
        rows = messages.get(c.id, [])
        history = History(
            conversation_id=c.external_id,
            channel=c.channel,
            system_prompt=c.system_prompt,
            tool_definitions=tuple(definitions.get(c.id, ())),
            messages=tuple(
                HistoryMessage(
                    row_id=m.id,
                    external_id=m.external_id,
                    role=m.role,
                    content=m.content,
                    created_at=m.created_at,
                    status=m.status,
                    model=m.model,
                    tool_calls=tuple(calls.get(m.id, ())),
                    service_calls=tuple(usage.get(m.id, ())),
                )
                for m in rows
            ),
        )
        call_ids = [call.row_id for m in history.messages for call in m.tool_calls]
        counts = StoredCounts(
            arguments={i: call_counts[i][0] for i in call_ids},
            results={i: call_counts[i][1] for i in call_ids},
            messages={m.id: m.content_tokens for m in rows},
        )
        loaded.append(
            LoadedConversation(
                id=c.id,
                external_id=c.external_id,
                title=c.title or "",
                freshness_seconds=None if c.freshness is None else int(c.freshness),
                history=history,
                counts=counts,
                costs=tuple(costs.get(c.id, ())),
            )
        )
    return loaded
