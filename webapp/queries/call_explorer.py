"""The calls explorer (``/calls`` and ``GET /api/v1/calls``): every tool call of a project,
filtered, searched, sorted and paged by keyset, in one query per page.

Filters: the tool, a status (the timeline's badges, computed here in SQL with the same rules as
``webapp.views.conversations.badges``), call duration and result size ranges, a time range (the
call's time), the conversation's channel, and full-text search over arguments and results
(``q``: every word must appear, whole words, any order; the database's own engine, see
``webapp.sql.call_text_matches``). Sorts: time, duration, size, either direction. A cursor is
``webapp.queries.cursors``' encoding of the last row's sort value and id; one made for another
sort is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    Text,
    and_,
    case,
    cast,
    false,
    func,
    literal,
    literal_column,
    select,
)
from sqlalchemy.sql.elements import ColumnElement

from ..analytics.filters import FilterError as RangeError
from ..analytics.filters import range_arg, range_start
from ..db import db
from ..models import Channel, Conversation, Message, Project, ToolInvocation, call_sort_key_sql
from ..sql import (
    CONTENT_NOT_CAPTURED,
    after_key,
    awaiting_response,
    call_text_matches,
    dialect_name,
    duration_ms,
    fts_match_ids,
    older_than,
    search_match_count,
)
from .conversations import FRESHNESS_WINDOW
from .cursors import CursorError, KeysetPage
from .cursors import decode as decode_cursor

T = ToolInvocation

# The statuses a call can be filtered by: the timeline's badge kinds.
STATUSES = ("error", "no-response", "stale", "redacted", "truncated", "not-captured")
SORTS = ("time", "duration", "size")
ORDERS = ("desc", "asc")
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_QUERY_CHARS = 200
MAX_NAME_CHARS = 255
PREVIEW_CHARS = 240
# A search matching at most this many calls (of all projects) is read from the search index.
SELECTIVE_MATCHES = 12_000
# Redaction lists that are not "redacted": none, or only the OTLP not-captured marker.
_NOT_REDACTED = ("null", "[]", f'["{CONTENT_NOT_CAPTURED}"]')


class FilterError(ValueError):
    """A query argument the explorer cannot use (the page answers 422 naming ``field``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class CallFilters:
    q: str = ""
    tool: str | None = None
    status: str | None = None
    channel: str | None = None
    min_ms: int | None = None
    max_ms: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    time_from: datetime | None = None  # calls at or after (UTC)
    time_to: datetime | None = None  # calls before (UTC; a day given as `to` includes it)
    sort: str = "time"
    order: str = "desc"
    # A preset (RANGES): time_from is that long before the request, from the start of its UTC
    # hour (analytics.filters.range_start).
    range: str | None = None

    def query_args(self) -> dict[str, str]:
        """The filters as URL query arguments (defaults left out), for links and the URL bar."""
        args: dict[str, str] = {}
        for name in ("q", "tool", "status", "channel"):
            if getattr(self, name):
                args[name] = getattr(self, name)
        for name in ("min_ms", "max_ms", "min_bytes", "max_bytes"):
            if getattr(self, name) is not None:
                args[name] = str(getattr(self, name))
        if self.range:
            args["range"] = self.range
        else:
            if self.time_from:
                args["from"] = self.time_from.isoformat()
            if self.time_to:
                args["to"] = self.time_to.isoformat()
        if self.sort != "time":
            args["sort"] = self.sort
        if self.order != "desc":
            args["order"] = self.order
        return args

    @property
    def active(self) -> bool:
        """Whether anything narrows the list (the page says "no calls match" then)."""
        return any(
            getattr(self, name) not in (None, "")
            for name in (
                "q",
                "tool",
                "status",
                "channel",
                "min_ms",
                "max_ms",
                "min_bytes",
                "max_bytes",
                "time_from",
                "time_to",
            )
        )


def _text(args: Mapping[str, str], name: str, limit: int = MAX_NAME_CHARS) -> str | None:
    value = " ".join((args.get(name) or "").split())
    if "\x00" in value:
        raise FilterError(name, "must not contain a NUL character")
    if len(value) > limit:
        raise FilterError(name, f"at most {limit} characters")
    return value or None


def _count(args: Mapping[str, str], name: str) -> int | None:
    raw = (args.get(name) or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise FilterError(name, "must be a whole number") from None
    if not 0 <= value <= 2**53:
        raise FilterError(name, "must be between 0 and 2^53")
    return value


def _moment(args: Mapping[str, str], name: str, end: bool) -> datetime | None:
    """An ISO 8601 day or timestamp (UTC unless it says otherwise). A day as ``to`` reaches
    to its end."""
    raw = (args.get(name) or "").strip()
    if not raw:
        return None
    try:
        if len(raw) == 10:
            day = date.fromisoformat(raw)
            start = datetime.combine(day, time.min, tzinfo=UTC)
            return start + timedelta(days=1) if end else start
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC)
    except ValueError:
        raise FilterError(name, "must be a date (2026-03-10) or an ISO 8601 timestamp") from None
    except OverflowError:
        # The end of 9999-12-31, or a time whose UTC falls outside years 1-9999: a bound at
        # the edge of the calendar bounds nothing (every stored call lies inside it).
        return None


def parse_filters(args: Mapping[str, str], now: datetime | None = None) -> CallFilters:
    """The explorer's filters from query arguments (the page's and the API's). A ``range``
    preset (the last 1h, 24h, 7d, 30d before ``now``, from the start of that UTC hour)
    replaces ``from`` and ``to``."""
    try:
        preset = range_arg(args)
    except RangeError as exc:
        raise FilterError(exc.field, exc.message) from None
    status = _text(args, "status")
    if status:
        status = status.replace("_", "-")
        if status not in STATUSES:
            raise FilterError("status", f"must be one of {', '.join(STATUSES)}")
    sort = _text(args, "sort") or "time"
    if sort not in SORTS:
        raise FilterError("sort", f"must be one of {', '.join(SORTS)}")
    order = _text(args, "order") or "desc"
    if order not in ORDERS:
        raise FilterError("order", "must be desc or asc")
    filters = CallFilters(
        q=_text(args, "q", MAX_QUERY_CHARS) or "",
        tool=_text(args, "tool"),
        status=status,
        channel=_text(args, "channel"),
        min_ms=_count(args, "min_ms"),
        max_ms=_count(args, "max_ms"),
        min_bytes=_count(args, "min_bytes"),
        max_bytes=_count(args, "max_bytes"),
        time_from=_moment(args, "from", end=False),
        time_to=_moment(args, "to", end=True),
        sort=sort,
        order=order,
    )
    if preset:
        since = range_start(preset, now or datetime.now(UTC))
        filters = replace(filters, range=preset, time_from=since, time_to=None)
    # A range whose low end is above its high end (min_bytes=9&max_bytes=3) is empty: no call
    # matches. It is a question with an answer, not a malformed one (an OpenAPI document cannot
    # compare two parameters, so a client cannot be told to avoid it).
    return filters


@dataclass(frozen=True, slots=True)
class CallRow:
    id: int
    external_tool_call_id: str
    function_name: str
    created_at: datetime
    duration_ms: float | None
    response_bytes: int | None
    response_tokens: int | None
    is_error: bool
    has_response: bool
    # The timeline's badge kinds that apply to the call now (error, no-response, stale, ...).
    statuses: tuple[str, ...]
    # The first characters of the arguments (JSON text) and of the result.
    arguments_preview: str | None
    response_preview: str | None
    message_id: int
    message_external_id: str
    # None while the call's message is not attached to a conversation yet.
    conversation_id: int | None
    conversation_external_id: str | None
    conversation_title: str | None
    channel: str | None
    # The keyset value of the sort (for the next cursor); not part of the JSON.
    sort_value: Any = field(metadata={"json": False})


CallPage = KeysetPage[CallRow]


def page_start(cursor: str | None, sort: str) -> tuple[Any, int] | None:
    """The keyset position a cursor of this list names (None: the first page). CursorError if
    it is damaged or was made for another sort."""
    if not cursor:
        return None
    value, row_id = decode_cursor(cursor)
    if sort == "time" and isinstance(value, datetime):
        return value, row_id
    if sort == "duration" and isinstance(value, Decimal):
        return float(value), row_id
    if sort == "size" and isinstance(value, int):
        return value, row_id
    raise CursorError(f"does not belong to sort '{sort}'")


# --- the statuses, in SQL (the rules of webapp.views.conversations.badges) ---------------------


def _stale(now: datetime) -> ColumnElement[bool]:
    return and_(
        T.response.is_not(None),
        Message.imported.is_(False),
        FRESHNESS_WINDOW.is_not(None),
        older_than(func.coalesce(T.response_created_at, T.created_at), now, FRESHNESS_WINDOW),
    )


def _redacted() -> ColumnElement[bool]:
    return and_(T.redactions.is_not(None), cast(T.redactions, Text).not_in(_NOT_REDACTED))


def _not_captured() -> ColumnElement[bool]:
    return and_(
        T.response.is_(None), cast(T.redactions, Text).like(f"%{CONTENT_NOT_CAPTURED}%")
    )


def status_conditions(now: datetime, token_cap: int | None) -> dict[str, ColumnElement[bool]]:
    return {
        "error": T.is_error.is_(True),
        "no-response": awaiting_response(T),
        "not-captured": _not_captured(),
        "stale": _stale(now),
        "redacted": _redacted(),
        "truncated": (
            func.coalesce(T.response_tokens, 0) > token_cap
            if token_cap is not None
            else literal(False)
        ),
    }


_INT32_MAX = 2**31 - 1


def _duration() -> ColumnElement[float]:
    return duration_ms(T.started_at, T.ended_at)


def _sort_key(sort: str) -> ColumnElement[Any]:
    """The keyset's first column. Duration and size are the expressions of their indexes, as
    text (webapp.models.call_sort_key_sql): the duration of ``webapp.sql.duration_ms``, -1 for
    none; the size, -1 for none."""
    if sort in ("duration", "size"):
        return literal_column(
            call_sort_key_sql(sort, dialect_name()), Float if sort == "duration" else Integer
        )
    return T.created_at


def filter_conditions(
    project_id: int,
    filters: CallFilters,
    statuses: dict[str, ColumnElement[bool]],
    *,
    search_drives: bool = False,
    per_row: bool = False,
) -> list[ColumnElement[bool]]:
    """``search_drives``: the search is selective: keep the planner from walking the
    project's index (``+ 0`` hides the column from it) so that it starts from the search's
    matches."""
    project = T.project_id + 0 if search_drives else T.project_id
    conditions: list[ColumnElement[bool]] = [project == project_id]
    if filters.q:
        conditions.append(
            call_text_matches(T.__table__, filters.q, per_row=per_row, drive=search_drives)
        )
    if filters.tool:
        conditions.append(T.function_name == filters.tool)
    if filters.status:
        conditions.append(statuses[filters.status])
    if filters.channel:
        conditions.append(Channel.name == filters.channel)
    # The ranges are bounds of the sort keys (-1 when there is no value; the bounds are never
    # negative), so the duration and size sorts read only the range from their index; an upper
    # bound keeps the calls without a value out as well.
    if filters.min_ms is not None:
        conditions.append(_sort_key("duration") >= filters.min_ms)
    if filters.max_ms is not None:
        conditions.append(_sort_key("duration") <= filters.max_ms)
        conditions.append(_duration() <= filters.max_ms)
    # response_bytes is a 32-bit column: PostgreSQL refuses a larger bound as out of range,
    # so a bound beyond it is clamped (no stored size can exceed it anyway).
    if filters.min_bytes is not None:
        conditions.append(_sort_key("size") >= min(filters.min_bytes, _INT32_MAX))
        if filters.min_bytes > _INT32_MAX:
            conditions.append(false())
    if filters.max_bytes is not None:
        conditions.append(_sort_key("size") <= min(filters.max_bytes, _INT32_MAX))
        conditions.append(T.response_bytes <= min(filters.max_bytes, _INT32_MAX))
    if filters.time_from is not None:
        conditions.append(T.created_at >= filters.time_from)
    if filters.time_to is not None:
        conditions.append(T.created_at < filters.time_to)
    return conditions


def list_calls(
    project_id: int,
    filters: CallFilters,
    *,
    now: datetime,
    token_cap: int | None,
    after: tuple[Any, int] | None = None,
    limit: int = DEFAULT_LIMIT,
) -> CallPage:
    """One page of the project's calls: one query (two with a search), whatever the number of
    calls."""
    statuses = status_conditions(now, token_cap)
    # Neither planner can tell how many calls a search matches: a few thousand are best read
    # from the search index and sorted; a word in most calls is best found walking the
    # project's calls in the sort's order. One cheap count decides.
    # With a word in most calls, the page is found walking the calls newest first and checking
    # each (the few first ones match) — only when nothing else filters nor another order sorts:
    # otherwise the matches are read once, whatever their number (a bounded cost).
    matches = search_match_count(filters.q, SELECTIVE_MATCHES) if filters.q else None
    search_drives = matches is not None and matches <= SELECTIVE_MATCHES
    per_row = (
        matches is not None
        and not search_drives
        and filters.sort == "time"
        and filters.order == "desc"
        and filters == CallFilters(q=filters.q)
    )
    key = _sort_key(filters.sort)
    descending = filters.order == "desc"
    # The page's ids first (only the joins a filter needs), then their columns: the previews,
    # statuses and names are computed for the page's rows, not for every row sorted.
    page = select(T.id.label("id"), key.label("sort_value"))
    if filters.channel or filters.status == "stale":
        page = _joined(page)
    page = page.where(
        *filter_conditions(
            project_id, filters, statuses, search_drives=search_drives, per_row=per_row
        )
    )
    if after is not None:
        page = page.where(after_key((key, T.id), after, descending=descending))
    order = (key.desc(), T.id.desc()) if descending else (key.asc(), T.id.asc())
    ids = page.order_by(*order).limit(limit + 1).subquery("page")
    flags = [case((condition, 1), else_=0).label(f"s_{n}") for n, condition in _flags(statuses)]
    stmt = _joined(
        select(
            T.id,
            T.external_tool_call_id,
            T.function_name,
            T.created_at,
            _duration().label("duration_ms"),
            T.response_bytes,
            T.response_tokens,
            T.is_error,
            T.response.is_not(None).label("has_response"),
            func.substr(cast(T.arguments, Text), 1, PREVIEW_CHARS).label("arguments_preview"),
            func.substr(T.response, 1, PREVIEW_CHARS).label("response_preview"),
            T.message_id,
            Message.external_id.label("message_external_id"),
            Conversation.id.label("conversation_id"),
            Conversation.external_id.label("conversation_external_id"),
            Conversation.title.label("conversation_title"),
            Channel.name.label("channel"),
            ids.c.sort_value,
            *flags,
        ).join(ids, ids.c.id == T.id)
    )
    outer_order = (
        (ids.c.sort_value.desc(), ids.c.id.desc())
        if descending
        else (ids.c.sort_value.asc(), ids.c.id.asc())
    )
    rows = db.session.execute(stmt.order_by(*outer_order)).all()
    return CallPage([_row(r, filters.sort) for r in rows[:limit]], len(rows) > limit)


def _joined(stmt: Any) -> Any:
    """A call's message, project (freshness window), conversation and channel."""
    return (
        stmt.join(Message, Message.id == T.message_id)
        .join(Project, Project.id == T.project_id)
        .outerjoin(Conversation, Conversation.id == Message.conversation_id)
        .outerjoin(Channel, Channel.id == Conversation.channel_id)
    )


def _flags(statuses: dict[str, ColumnElement[bool]]) -> list[tuple[str, ColumnElement[bool]]]:
    return [(kind.replace("-", "_"), statuses[kind]) for kind in STATUSES]


def _row(r: Any, sort: str) -> CallRow:
    kinds = tuple(kind for kind in STATUSES if getattr(r, f"s_{kind.replace('-', '_')}"))
    if "not-captured" in kinds:
        kinds = tuple(k for k in kinds if k != "no-response")
    duration = None if r.duration_ms is None else max(float(r.duration_ms), 0.0)
    if sort == "duration":
        sort_value: Any = Decimal(repr(float(r.sort_value)))
    elif sort == "size":
        sort_value = int(r.sort_value)
    else:
        sort_value = r.sort_value
    return CallRow(
        id=r.id,
        external_tool_call_id=r.external_tool_call_id or "",
        function_name=r.function_name,
        created_at=r.created_at,
        duration_ms=duration,
        response_bytes=r.response_bytes,
        response_tokens=r.response_tokens,
        is_error=bool(r.is_error),
        has_response=bool(r.has_response),
        statuses=kinds,
        arguments_preview=r.arguments_preview,
        response_preview=r.response_preview,
        message_id=r.message_id,
        message_external_id=r.message_external_id,
        conversation_id=r.conversation_id,
        conversation_external_id=r.conversation_external_id,
        conversation_title=r.conversation_title,
        channel=r.channel,
        sort_value=sort_value,
    )

# The explorer's total counts at most this many matches ("10,000+").
TOTAL_CAP = 10_000


def count_calls(
    project_id: int,
    filters: CallFilters,
    *,
    now: datetime,
    token_cap: int | None,
    cap: int = TOTAL_CAP,
) -> int:
    """How many calls match ``filters``, counted up to ``cap + 1`` in one statement (above
    ``cap`` reads "more than cap"): the filters of ``list_calls``, without its sort.

    A search on SQLite starts from the search index's matches, each call looked up by id, and
    stops at ``cap + 1``: as ``id IN (matches)`` SQLite read every match into a temporary set
    first, all the calls for a word in every call (x3.0 from 100,000 to 1,000,000 calls, 1 s
    at 5,000,000; issue 24). ``+ 0`` keeps the planner off the project's indexes."""
    statuses = status_conditions(now, token_cap)
    search = fts_match_ids(filters.q) if filters.q and dialect_name() == "sqlite" else None
    if search is not None:
        matching = select(T.id).select_from(search).join(T, T.id == search.c.id)
        conditions = filter_conditions(
            project_id, replace(filters, q=""), statuses, search_drives=True
        )
    else:
        matching = select(T.id)
        conditions = filter_conditions(project_id, filters, statuses)
    if filters.channel or filters.status == "stale":
        matching = _joined(matching)
    matching = matching.where(*conditions).limit(cap + 1)
    return db.session.scalar(select(func.count()).select_from(matching.subquery())) or 0
