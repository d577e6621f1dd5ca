"""The dashboard login's rate limit: attempts per client address and per account.

Attempts are counted in fixed windows (``LOGIN_WINDOW_SECONDS``) in the database, so that every
gunicorn worker and every server counts the same ones, with one atomic upsert per key: two
requests at once cannot both read the count before either adds to it. Every attempt counts and
is counted before the password is checked; one over a limit is refused without checking the
password, so refused guesses teach nothing. A successful login clears the counts of its address
and account.

The dashboard has one password, so one account (``ACCOUNT``); a login form with names would
count each name.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import case, delete

from .db import db
from .models import LoginThrottle
from .sql import dialect_insert

ACCOUNT = "admin"
THROTTLE = LoginThrottle.__table__


def count_attempt(address: str | None, now: datetime, account: str = ACCOUNT) -> int | None:
    """Count a login attempt. Seconds until the client may try again when it is over a limit
    (the attempt is then refused), else None.

    The address is counted first; an attempt its address may not make does not count for the
    account, so one address cannot use up the account's attempts for everyone.
    """
    window = _window()
    for key, limit in _limits(address, account).items():
        window_start, attempts = _add_attempt(key, now, window)
        if attempts > limit:
            return max(1, math.ceil((window_start + window - now).total_seconds()))
    return None


def clear(address: str | None, now: datetime, account: str = ACCOUNT) -> None:
    """After a successful login: forget its attempts, and every window that has ended."""
    keys = list(_limits(address, account))
    db.session.execute(
        delete(LoginThrottle).where(
            LoginThrottle.key.in_(keys) | (LoginThrottle.window_start <= now - _window())
        )
    )


def _window() -> timedelta:
    return timedelta(seconds=current_app.config["LOGIN_WINDOW_SECONDS"])


def _limits(address: str | None, account: str) -> dict[str, int]:
    config = current_app.config
    return {
        f"address:{address or 'unknown'}": config["LOGIN_ATTEMPTS_PER_ADDRESS"],
        f"account:{account}": config["LOGIN_ATTEMPTS_PER_ACCOUNT"],
    }


def _add_attempt(key: str, now: datetime, window: timedelta) -> tuple[datetime, int]:
    """Add one attempt to `key`'s window (a new window once the last has ended), atomically;
    the window's start and its attempts so far."""
    insert = dialect_insert(THROTTLE)
    current = THROTTLE.c.window_start > now - window
    statement = (
        insert.values(key=key, window_start=now, attempts=1)
        .on_conflict_do_update(
            index_elements=[THROTTLE.c.key],
            set_={
                "attempts": case((current, THROTTLE.c.attempts + 1), else_=1),
                "window_start": case(
                    (current, THROTTLE.c.window_start), else_=insert.excluded.window_start
                ),
            },
        )
        .returning(THROTTLE.c.window_start, THROTTLE.c.attempts)
    )
    window_start, attempts = db.session.execute(statement).one()
    return window_start, attempts
