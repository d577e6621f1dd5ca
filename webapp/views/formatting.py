"""Jinja filters for numbers, sizes, durations and times (pure, so they are easy to test)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from flask import Flask
from markupsafe import Markup

# Shown for a missing value (an en dash, written as an escape for the linter).
NONE = "\u2013"


def number(value: int | float | None) -> str:
    if value is None:
        return NONE
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def size(num_bytes: int | float | None) -> str:
    if num_bytes is None:
        return NONE
    value = float(num_bytes)
    for unit in ("B", "KB", "MB"):
        if value < 1024 or unit == "MB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(ms: float | None) -> str:
    if ms is None:
        return NONE
    if ms < 1:
        return f"{ms:.2f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    minutes, seconds = divmod(ms / 1000, 60)
    return f"{int(minutes)} min {seconds:.0f} s"


# A span of seconds in the largest units it holds whole: a freshness window of 3,888,000 s is
# "45 d", of 300 s "5 min", of 5,400 s "1 h 30 min".
SPAN_UNITS = (("d", 86400), ("h", 3600), ("min", 60))


def span(seconds: float | None) -> str:
    """A length of time given in seconds, in human units ("45 d", "5 min", "1 h 30 min",
    "30 s", "0.5 s"); exact (every unit it holds is shown), since it is a setting."""
    if seconds is None:
        return NONE
    if seconds < 0:
        return f"{seconds:g} s"
    rest = Decimal(str(seconds))
    parts = []
    for unit, size in SPAN_UNITS:
        whole, rest = divmod(rest, size)
        if whole:
            parts.append(f"{int(whole)} {unit}")
    if rest or not parts:
        parts.append(f"{rest.normalize():f} s")
    return " ".join(parts)


def timestamp(value: datetime | None) -> str:
    """UTC, to the second, sortable and unambiguous."""
    if value is None:
        return NONE
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def precise(value: datetime | None) -> str:
    if value is None:
        return NONE
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def usd(value: Decimal | float | None) -> str:
    if value is None:
        return NONE
    amount = Decimal(value)
    if amount == 0:
        return "$0"
    if abs(amount) < 1:
        return f"${amount:.4f}"
    return f"${amount:,.2f}"


def percent(value: float | None) -> str:
    if value is None:
        return NONE
    if not value:
        return "0%"
    # 2 errors in 5,000 calls is not "0.0%".
    return "<0.1%" if value < 0.001 else f"{value * 100:.1f}%"


# An error rate at or above this is shown in red; below it (but above zero) in amber; no
# errors at all, plain. One tool call in a hundred failing is worth a look.
ERROR_RATE_ALERT = 0.01


def error_level(rate: float | None) -> str:
    """The CSS class of an error rate: "text-error", "text-warn" or "" (no errors)."""
    if not rate:
        return ""
    return "text-error" if rate >= ERROR_RATE_ALERT else "text-warn"


def ago(value: datetime | None, now: datetime | None = None) -> str:
    if value is None:
        return NONE
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    if seconds < 0:
        return "in the future"
    for limit, divisor, unit in (
        (60, 1, "s"),
        (3600, 60, "min"),
        (86400, 3600, "h"),
        (86400 * 60, 86400, "d"),
    ):
        if seconds < limit:
            return f"{int(seconds // divisor)} {unit} ago"
    return timestamp(value)[:10]


def age(value: datetime | None, now: datetime | None = None) -> Markup:
    """How long ago, human-readable ("3 min ago", "2 d ago"), with the exact UTC time in the
    title and the machine-readable one in ``datetime``."""
    if value is None:
        return Markup(NONE)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        value.astimezone(UTC).isoformat(), timestamp(value), ago(value, now)
    )


def init_app(app: Flask) -> None:
    for name, func in {
        "number": number,
        "size": size,
        "duration": duration,
        "span": span,
        "timestamp": timestamp,
        "precise": precise,
        "usd": usd,
        "percent": percent,
        "ago": ago,
        "age": age,
        "error_level": error_level,
    }.items():
        app.jinja_env.filters[name] = func
