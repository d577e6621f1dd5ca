"""The conversations list of the dashboard and of the API (``GET /api/v1/conversations``): one
search, one set of filters, one sort and one cursor format, in two queries per page (the page of
conversations, then their aggregates — see ``stats.py``).

Search (``q``, case-insensitive, ``%`` and ``_`` taken literally) finds a conversation by its id,
its title, the text or id of any of its messages, or the name of a tool it called. A cursor is
``webapp.queries.cursors``' encoding of the last row's sort value and id; one made for another
sort is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from sqlalchemy import case, exists, func, literal, or_, select
from sqlalchemy.sql.elements import ColumnElement

from ..db import db
from ..models import Channel, Conversation, Message, ServiceCall, ToolInvocation
from ..sql import after_key, awaiting_response
from . import stats
from .cursors import CursorError, KeysetPage
from .cursors import decode as decode_cursor
from .records import ConversationStats

SORTS = ("recent", "oldest", "calls", "errors", "tokens")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_QUERY_CHARS = 200
# The list's total counts at most this many matches ("10,000+"): one bounded COUNT per search.
TOTAL_CAP = 10_000


def search_text(raw: str | None) -> str:
    """The search as it is run and shown: runs of white space are one space."""
    return " ".join((raw or "").split())


@dataclass(frozen=True, slots=True)
class ListFilters:
    q: str = ""
    channel: str | None = None
    has_errors: bool = False
    missing_responses: bool = False
    failed_runs: bool = False
    date_from: date | None = None  # last activity on or after this day (UTC)
    date_to: date | None = None  # last activity on or before this day (UTC)
    sort: str = "recent"
    # A time range preset (1h, 24h, 7d, 30d): last activity at or after `since`, that long
    # before the request; it replaces date_from and date_to.
    range: str | None = None
    since: datetime | None = None

    def query_args(self) -> dict[str, str]:
        """The filters as URL query arguments (defaults left out), for links and the URL bar."""
        args: dict[str, str] = {}
        if self.q:
            args["q"] = self.q
        if self.channel:
            args["channel"] = self.channel
        for name in ("has_errors", "missing_responses", "failed_runs"):
            if getattr(self, name):
                args[name] = "1"
        if self.range:
            args["range"] = self.range
        if self.date_from:
            args["from"] = self.date_from.isoformat()
        if self.date_to:
            args["to"] = self.date_to.isoformat()
        if self.sort != "recent":
            args["sort"] = self.sort
        return args

    @property
    def active(self) -> bool:
        """Whether anything narrows the list (its total then says "match")."""
        return any(v != "sort" for v in self.query_args())


@dataclass(frozen=True, slots=True)
class ConversationRow:
    id: int
    external_id: str
    title: str
    channel: str | None
    created_at: datetime
    updated_at: datetime
    stats: ConversationStats
    # The API lists it; the dashboard's JSON twin never did.
    meta: dict[str, Any] = field(metadata={"json": False})
    # The keyset value of the sort (for the next cursor); not part of the JSON twin.
    sort_value: Any = field(metadata={"json": False})


ConversationPage = KeysetPage[ConversationRow]


def page_start(cursor: str | None, sort: str) -> tuple[Any, int] | None:
    """The keyset position a cursor of this list names (None: the first page). CursorError if
    it is damaged or was made for another sort."""
    if not cursor:
        return None
    after = decode_cursor(cursor)
    expected = datetime if sort in ("recent", "oldest") else int
    if not isinstance(after[0], expected):
        raise CursorError(f"does not belong to sort '{sort}'")
    return after


def _start_of(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def _calls_in(conversation: Any, *conditions: ColumnElement[bool]) -> ColumnElement[bool]:
    return exists(
        select(literal(1))
        .select_from(ToolInvocation)
        .join(Message, Message.id == ToolInvocation.message_id)
        .where(Message.conversation_id == conversation.id, *conditions)
    )


def _search(q: str) -> ColumnElement[bool]:
    c = Conversation
    return or_(
        c.title.icontains(q, autoescape=True),
        c.external_id.icontains(q, autoescape=True),
        exists(
            select(literal(1)).where(
                Message.conversation_id == c.id,
                or_(
                    Message.content.icontains(q, autoescape=True),
                    Message.external_id.icontains(q, autoescape=True),
                ),
            )
        ),
        _calls_in(c, ToolInvocation.function_name.icontains(q, autoescape=True)),
    )


def filter_conditions(project_id: int, filters: ListFilters) -> list[ColumnElement[bool]]:
    c = Conversation
    conditions: list[ColumnElement[bool]] = [c.project_id == project_id]
    if filters.q:
        conditions.append(_search(filters.q))
    if filters.channel:
        conditions.append(
            c.channel_id.in_(
                select(Channel.id).where(
                    Channel.project_id == project_id, Channel.name == filters.channel
                )
            )
        )
    if filters.has_errors:
        conditions.append(_calls_in(c, ToolInvocation.is_error.is_(True)))
    if filters.missing_responses:
        conditions.append(_calls_in(c, awaiting_response(ToolInvocation)))
    if filters.failed_runs:
        conditions.append(
            exists(
                select(literal(1)).where(
                    Message.conversation_id == c.id, Message.status.in_(stats.FAILED_STATUSES)
                )
            )
        )
    if filters.date_from:
        conditions.append(c.updated_at >= _start_of(filters.date_from))
    if filters.date_to:
        conditions.append(c.updated_at < _start_of(filters.date_to + timedelta(days=1)))
    if filters.since is not None:
        conditions.append(c.updated_at >= filters.since)
    return conditions


def count_conversations(project_id: int, filters: ListFilters, cap: int = TOTAL_CAP) -> int:
    """How many conversations match ``filters``, counted up to ``cap + 1`` (one statement; a
    result above ``cap`` means "more than cap", so a broad filter costs no more than that)."""
    matching = (
        select(Conversation.id).where(*filter_conditions(project_id, filters)).limit(cap + 1)
    )
    return db.session.scalar(select(func.count()).select_from(matching.subquery())) or 0


def _project_aggregate(project_id: int, sort: str):
    """For sorts by an aggregate: (conversation_id, value) over the whole project."""
    if sort in ("calls", "errors"):
        value = (
            func.count(ToolInvocation.id)
            if sort == "calls"
            else func.sum(case((ToolInvocation.is_error, 1), else_=0))
        )
        return (
            select(Message.conversation_id.label("conversation_id"), value.label("value"))
            .join(Message, Message.id == ToolInvocation.message_id)
            .where(ToolInvocation.project_id == project_id)
            .group_by(Message.conversation_id)
            .subquery()
        )
    value = func.coalesce(func.sum(ServiceCall.input_tokens), 0) + func.coalesce(
        func.sum(ServiceCall.output_tokens), 0
    )
    return (
        select(Message.conversation_id.label("conversation_id"), value.label("value"))
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.project_id == project_id)
        .group_by(Message.conversation_id)
        .subquery()
    )


def _base_select():
    c = Conversation
    return select(
        c.id,
        c.external_id,
        c.title,
        c.meta,
        c.created_at,
        c.updated_at,
        Channel.name.label("channel"),
    ).outerjoin(Channel, Channel.id == c.channel_id)


def list_conversations(
    project_id: int,
    filters: ListFilters,
    *,
    after: tuple[Any, int] | None = None,
    limit: int = DEFAULT_LIMIT,
) -> ConversationPage:
    """One page of conversations, then their aggregates: three to four queries in all."""
    c = Conversation
    stmt = _base_select()
    descending = filters.sort != "oldest"
    if filters.sort in ("recent", "oldest"):
        key: Any = c.updated_at
    else:
        aggregate = _project_aggregate(project_id, filters.sort)
        stmt = stmt.outerjoin(aggregate, aggregate.c.conversation_id == c.id)
        key = func.coalesce(aggregate.c.value, 0)
    stmt = stmt.add_columns(key.label("sort_value")).where(*filter_conditions(project_id, filters))
    if after is not None:
        stmt = stmt.where(after_key((key, c.id), after, descending=descending))
    order = (key.desc(), c.id.desc()) if descending else (key.asc(), c.id.asc())
    rows = db.session.execute(stmt.order_by(*order).limit(limit + 1)).all()
    has_more = len(rows) > limit
    return ConversationPage(_with_stats(rows[:limit], filters.sort), has_more)


def _with_stats(rows: Sequence[Any], sort: str) -> list[ConversationRow]:
    aggregates = stats.conversation_stats([r.id for r in rows])
    return [
        ConversationRow(
            id=r.id,
            external_id=r.external_id,
            title=r.title,
            channel=r.channel,
            created_at=r.created_at,
            updated_at=r.updated_at,
            stats=aggregates[r.id],
            meta=r.meta or {},
            sort_value=_sort_value(r.sort_value, sort),
        )
        for r in rows
    ]


def _sort_value(value: Any, sort: str) -> Any:
    if sort in ("recent", "oldest"):
        return value  # a UTC datetime (UTCDateTime)
    return int(value or 0)


def newest_activity(project_id: int) -> datetime | None:
    """The latest ``updated_at`` in the project: the list page's cheap "anything new?" poll."""
    return db.session.scalar(
        select(func.max(Conversation.updated_at)).where(Conversation.project_id == project_id)
    )


def updated_since(
    project_id: int, filters: ListFilters, since: datetime, limit: int = DEFAULT_LIMIT
) -> ConversationPage:
    """Conversations matching ``filters`` active after ``since``, newest first."""
    c = Conversation
    stmt = (
        _base_select()
        .add_columns(c.updated_at.label("sort_value"))
        .where(*filter_conditions(project_id, filters), c.updated_at > since)
        .order_by(c.updated_at.desc(), c.id.desc())
        .limit(limit)
    )
    return ConversationPage(_with_stats(db.session.execute(stmt).all(), "recent"), False)

