"""The filters every project chart follows (period, channel, tool), parsed from query arguments.

Pure module. Argument names match the conversations list (``from``, ``to``, ``channel``), so a
link can carry the same filters from one page to the other. Days are UTC days.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

__all__ = [
    "DEFAULT_DAYS",
    "PRESETS",
    "RANGES",
    "ChartFilters",
    "FilterError",
    "parse_filters",
    "range_arg",
    "range_start",
]

DEFAULT_DAYS = 30
PRESETS = (7, 30, 90)
MAX_DAYS = 3660  # ten years of daily points is still a light chart
MAX_NAME = 255  # channel and tool names are stored in columns of this size
# The time range picker's presets (``range=``), on every page that has one and in the API: the
# last hour, day, week or month up to the moment of the request, from the start of the UTC hour
# it begins in (``range_start``). A preset stays relative in the URL (a saved view of "last 24
# h" shows the last 24 hours whenever it is opened); a custom range is ``from``/``to``.
RANGES = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
RANGE_LABELS = {"1h": "Last hour", "24h": "Last 24 h", "7d": "Last 7 days", "30d": "Last 30 days"}


class FilterError(ValueError):
    """A query argument the charts cannot use (answered with 422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class ChartFilters:
    date_from: date
    date_to: date
    channel: str | None = None
    tool: str | None = None
    # A ``range`` preset: its name, and the moment it starts (the charts count from there;
    # their days are the UTC days it touches).
    range: str | None = None
    since: datetime | None = None

    @property
    def start(self) -> datetime:
        """First instant of the period (UTC)."""
        if self.since is not None:
            return self.since
        return datetime.combine(self.date_from, time.min, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """First instant after the period (UTC)."""
        return datetime.combine(self.date_to + timedelta(days=1), time.min, tzinfo=UTC)

    @property
    def days(self) -> list[date]:
        return [
            self.date_from + timedelta(days=i)
            for i in range((self.date_to - self.date_from).days + 1)
        ]

    def query_args(self) -> dict[str, str]:
        """As URL query arguments, for links, CSV downloads and the address bar."""
        args: dict[str, str] = {}
        if self.range:
            args["range"] = self.range
        else:
            args = {"from": self.date_from.isoformat(), "to": self.date_to.isoformat()}
        if self.channel:
            args["channel"] = self.channel
        if self.tool:
            args["tool"] = self.tool
        return args

    def preset(self, days: int) -> dict[str, str]:
        """The same filters over the last ``days`` days ending on ``date_to``."""
        args = self.query_args()
        args.pop("range", None)
        args["to"] = self.date_to.isoformat()
        args["from"] = (self.date_to - timedelta(days=days - 1)).isoformat()
        return args


def range_arg(args: Mapping[str, str]) -> str | None:
    """The ``range`` preset asked for (None: none); FilterError if it is not one of RANGES."""
    raw = (args.get("range") or "").strip()
    if raw and raw not in RANGES:
        raise FilterError("range", f"must be one of {', '.join(RANGES)}")
    return raw or None


def range_start(preset: str, now: datetime) -> datetime:
    """The first instant (UTC) a preset covers at ``now``: ``RANGES[preset]`` before it, down to
    the start of that UTC hour, as dashboards over roll-ups align a relative range to their
    bucket (Grafana's ``now-24h/h``): "Last 24 h" at 14:37 counts from 14:00 the day before.
    Every page and the API resolve a preset here, so the same range is the same calls
    everywhere, and the pages that sum the per-hour roll-ups read whole hours only, whatever the
    number of calls in an hour (issue 24)."""
    since = now - RANGES[preset]
    since = since.astimezone(UTC) if since.tzinfo is not None else since.replace(tzinfo=UTC)
    return since.replace(minute=0, second=0, microsecond=0)


def _day(args: Mapping[str, str], name: str, default: date) -> date:
    raw = (args.get(name) or "").strip()
    if not raw:
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        raise FilterError(name, "must be a date like 2025-01-31") from None


def _name(args: Mapping[str, str], name: str) -> str | None:
    raw = (args.get(name) or "").strip()
    if len(raw) > MAX_NAME:
        raise FilterError(name, f"must be at most {MAX_NAME} characters")
    return raw or None


def parse_filters(
    args: Mapping[str, str], today: date, now: datetime | None = None
) -> ChartFilters:
    """Filters from query arguments; the default period is the last 30 days up to ``today``.
    A ``range`` preset (counted back from ``now``, ``range_start``) replaces ``from`` and ``to``."""
    preset = range_arg(args)
    if preset:
        moment = now or datetime.combine(today, time.max, tzinfo=UTC)
        since = range_start(preset, moment)
        return ChartFilters(
            since.date(),
            moment.date(),
            _name(args, "channel"),
            _name(args, "tool"),
            range=preset,
            since=since,
        )
    date_to = _day(args, "to", today)
    date_from = _day(args, "from", date_to - timedelta(days=DEFAULT_DAYS - 1))
    if date_from > date_to:
        raise FilterError("from", "must not be after 'to'")
    if (date_to - date_from).days >= MAX_DAYS:
        raise FilterError("from", f"the period can be at most {MAX_DAYS} days")
    return ChartFilters(date_from, date_to, _name(args, "channel"), _name(args, "tool"))
