"""A study's conversations picked by the calls explorer's filters (docs/runs.md, 'Studies'):
the conversations that hold at least one call matching them (tool, status, search, channel,
duration and size ranges, time), the one whose newest matching call is newest first.

The filters are the explorer's own (``queries.call_explorer``: ``parse_filters`` reads them,
``filter_conditions`` and ``status_conditions`` say what matches), so "Study these
conversations" on ``/calls`` studies exactly the conversations of the calls listed there. The
explorer's sort and order say nothing about which conversations, and are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from ..db import db
from ..models import Message, ToolInvocation
from .call_explorer import (
    CallFilters,
    FilterError,
    _joined,
    filter_conditions,
    parse_filters,
    status_conditions,
)

T = ToolInvocation

# The filters a selection takes: the explorer's query arguments, without its sort.
FIELDS = (
    "q",
    "tool",
    "status",
    "channel",
    "min_ms",
    "max_ms",
    "min_bytes",
    "max_bytes",
    "from",
    "to",
    "range",
)


def selection_filters(values: Mapping[str, Any], now: datetime | None = None) -> CallFilters:
    """The explorer's filters from a selection's values (the API's ``{"calls": {...}}`` or the
    form's fields), read as the explorer reads its query arguments. Raises ``FilterError``
    naming the field: an unknown one, or a value the explorer refuses."""
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise FilterError(unknown[0], f"not a filter of the calls explorer ({', '.join(FIELDS)})")
    args = {name: _text(value) for name, value in values.items() if value is not None}
    # A bound at the calendar's edge (`to` 9999-12-31) bounds nothing: the explorer's own rule.
    return parse_filters(args, now)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else ""
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def selection_args(filters: CallFilters) -> dict[str, str]:
    """The filters as the selection's values (strings, defaults left out): what a study
    records and what links to the explorer carry."""
    return {k: v for k, v in filters.query_args().items() if k in FIELDS}


def conversation_ids(
    project_id: int,
    filters: CallFilters,
    *,
    now: datetime,
    token_cap: int | None,
    limit: int,
) -> list[int]:
    """The row ids of the conversations holding a call that matches ``filters``, the newest
    matching call first, at most ``limit`` (one statement). Calls not yet attached to a
    conversation are left out."""
    statuses = status_conditions(now, token_cap)
    newest = func.max(T.created_at)
    stmt = (
        _joined(select(Message.conversation_id, newest.label("newest")))
        .where(
            *filter_conditions(project_id, filters, statuses),
            Message.conversation_id.is_not(None),
        )
        .group_by(Message.conversation_id)
        .order_by(newest.desc(), Message.conversation_id.desc())
        .limit(limit)
    )
    return [row.conversation_id for row in db.session.execute(stmt)]


__all__ = ["FIELDS", "FilterError", "conversation_ids", "selection_args", "selection_filters"]
