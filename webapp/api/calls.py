"""`GET /api/v1/calls`: every tool call of the project, filtered, searched, sorted and paged —
the dashboard's calls explorer (`/calls`), from the same query
(`webapp.queries.call_explorer`)."""

from __future__ import annotations

from typing import Any, Literal

from flask import current_app, g, jsonify
from flask_openapi3 import Tag
from pydantic import BaseModel, ConfigDict, Field

from ..db import utcnow
from ..errors import ApiError
from ..queries import call_explorer as queries
from ..queries.cursors import CursorError
from ..services.call_list import call_item
from . import bp
from .endpoint import cursor_error, endpoint
from .schemas import CURSOR_SCHEMA, NUL_FREE, error_responses

TAG = Tag(name="Tool calls", description="Every tool call of the project, searched and filtered.")


# A day (2026-03-10) or an ISO 8601 timestamp, as `call_explorer.parse_filters` reads them;
# empty is not set.
_MOMENT = {
    "anyOf": [
        {"type": "string", "format": "date"},
        {"type": "string", "format": "date-time"},
        {"type": "string", "maxLength": 0},
    ]
}


class CallListQuery(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    q: str | None = Field(
        default=None,
        description="Words that must all appear in the arguments or the result (whole words, "
        "any order, case-insensitive), e.g. `upstream timeout`.",
        max_length=queries.MAX_QUERY_CHARS,
        json_schema_extra=NUL_FREE,
    )
    tool: str | None = Field(
        default=None,
        description="Exact tool (function) name.",
        max_length=queries.MAX_NAME_CHARS,
        json_schema_extra=NUL_FREE,
    )
    status: (
        Literal["error", "no-response", "stale", "redacted", "truncated", "not-captured"] | None
    ) = Field(default=None, description="The dashboard's badges: calls that have this one now.")
    channel: str | None = Field(
        default=None,
        description="The conversation's channel.",
        max_length=queries.MAX_NAME_CHARS,
        json_schema_extra=NUL_FREE,
    )
    # A range whose low end is above its high end is empty: no call matches.
    min_ms: int | None = Field(default=None, ge=0, le=2**53, description="Shortest duration (ms).")
    max_ms: int | None = Field(default=None, ge=0, le=2**53, description="Longest duration (ms).")
    min_bytes: int | None = Field(
        default=None, ge=0, le=2**53, description="Smallest result (bytes)."
    )
    max_bytes: int | None = Field(
        default=None, ge=0, le=2**53, description="Largest result (bytes)."
    )
    from_: str | None = Field(
        default=None,
        alias="from",
        description="Calls at or after this ISO 8601 timestamp or day (UTC unless stated).",
        json_schema_extra=_MOMENT,
    )
    to: str | None = Field(
        default=None,
        description="Calls before this timestamp; a day includes the whole day.",
        json_schema_extra=_MOMENT,
    )
    range: Literal["1h", "24h", "7d", "30d"] | None = Field(
        default=None,
        description="Calls in the last hour, 24 hours, 7 or 30 days; replaces `from` and `to`.",
    )
    sort: Literal["time", "duration", "size"] = "time"
    order: Literal["desc", "asc"] = "desc"
    limit: int = Field(default=50, ge=1, le=queries.MAX_LIMIT)
    cursor: str | None = Field(default=None, json_schema_extra=CURSOR_SCHEMA)


class CallConversationOut(BaseModel):
    id: str = Field(description="The conversation id the agent sent.")
    row_id: int = Field(description="The dashboard's id (`/conversations/<row_id>`).")
    title: str
    channel: str | None


class CallOut(BaseModel):
    id: int = Field(description="The call's row id (`/calls/<id>` on the dashboard).")
    object: Literal["tool_call"]
    tool_call_id: str
    function_name: str
    created_at: str
    duration_ms: float | None
    result_bytes: int | None
    result_tokens: int | None
    is_error: bool
    has_result: bool
    statuses: list[str]
    arguments_preview: str | None
    result_preview: str | None
    message_id: str
    conversation: CallConversationOut | None = Field(
        description="None while the call's message is not attached to a conversation."
    )
    url: str = Field(description="The call in its conversation on the dashboard.")


class CallList(BaseModel):
    object: Literal["list"]
    data: list[CallOut]
    has_more: bool
    next_cursor: str | None


def _filters(query: CallListQuery) -> tuple[queries.CallFilters, Any]:
    args = {
        k: str(v)
        for k, v in query.model_dump(by_alias=True, exclude={"limit", "cursor"}).items()
        if v is not None
    }
    try:
        filters = queries.parse_filters(args)
        return filters, queries.page_start(query.cursor, filters.sort)
    except queries.FilterError as exc:
        field = f"query.{exc.field}"
        details = [{"field": field, "message": exc.message}]
        raise ApiError(422, f"{field}: {exc.message}", details) from None
    except CursorError:
        message = "not a cursor returned by this API for this sort"
        raise cursor_error(query.cursor, message) from None


@bp.get(
    "/calls",
    tags=[TAG],
    summary="List tool calls: search arguments and results, filter, sort",
    responses={200: CallList, **error_responses(404, 422)},
)
@endpoint()
def calls_get(query: CallListQuery):
    """Every tool call of the project, newest first by default. Keyset paging: pass
    `next_cursor` as `cursor` (with the same filters and sort) for the next page. One query per
    page, whatever the number of calls."""
    filters, after = _filters(query)
    page = queries.list_calls(
        g.project.id,
        filters,
        now=utcnow(),
        token_cap=current_app.config["REPLAY_RESULT_TOKEN_CAP"],
        after=after,
        limit=query.limit,
    )
    return jsonify(
        {
            "object": "list",
            "data": [call_item(row) for row in page.rows],
            "has_more": page.has_more,
            "next_cursor": page.next_cursor,
        }
    )
