"""Conversations-list filters from query arguments (pure: tested without a request)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime

from ...analytics.filters import FilterError, range_arg, range_start
from ...queries.conversation_list import MAX_QUERY_CHARS, SORTS, ListFilters, search_text
from ..common import BadParameter

TRUE_VALUES = {"1", "true", "on", "yes"}


def _flag(args: Mapping[str, str], name: str) -> bool:
    return args.get(name, "").strip().lower() in TRUE_VALUES


def _day(args: Mapping[str, str], name: str) -> date | None:
    raw = args.get(name, "").strip()
    if not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise BadParameter(name, "must be a date like 2026-03-10") from None


def parse_filters(args: Mapping[str, str], now: datetime | None = None) -> ListFilters:
    """A ``range`` preset (last activity in the last 1h, 24h, 7d, 30d before ``now``) replaces
    the days ``from`` and ``to``."""
    try:
        preset = range_arg(args)
    except FilterError as exc:
        raise BadParameter(exc.field, exc.message) from None
    q = search_text(args.get("q"))
    if len(q) > MAX_QUERY_CHARS:
        raise BadParameter("q", f"at most {MAX_QUERY_CHARS} characters")
    sort = args.get("sort", "").strip() or "recent"
    if sort not in SORTS:
        raise BadParameter("sort", f"must be one of {', '.join(SORTS)}")
    date_from, date_to = (None, None) if preset else (_day(args, "from"), _day(args, "to"))
    if date_from and date_to and date_from > date_to:
        raise BadParameter("to", "must not be before 'from'")
    return ListFilters(
        q=q,
        channel=args.get("channel", "").strip() or None,
        has_errors=_flag(args, "has_errors"),
        missing_responses=_flag(args, "missing_responses"),
        failed_runs=_flag(args, "failed_runs"),
        date_from=date_from,
        date_to=date_to,
        sort=sort,
        range=preset,
        since=range_start(preset, now or datetime.now(UTC)) if preset else None,
    )
