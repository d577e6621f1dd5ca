"""API keys (per project, shown once, stored as a hash) and the dashboard login guard."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from flask import current_app, g, request, session
from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.exc import OperationalError

from .db import db, utcnow
from .errors import ApiError
from .models import ApiKey, DashboardSession, Project

KEY_PREFIX = "ts_"
# Updating last_used_at on every request would turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(project: Project, name: str = "") -> tuple[ApiKey, str]:
    """Make a key for a project; the plain key is returned once and never stored."""
    plain = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(project_id=project.id, name=name, prefix=plain[:10], key_hash=hash_key(plain))
    db.session.add(key)
    return key, plain


def get_or_create_project(slug: str, name: str | None = None) -> Project:
    project = db.session.scalar(select(Project).where(Project.slug == slug))
    if project is None:
        project = Project(
            slug=slug,
            name=name or slug,
            freshness_seconds=current_app.config["FRESHNESS_SECONDS"],
            price_overrides={},
        )
        db.session.add(project)
        db.session.flush()
    return project


def _bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


@dataclass(frozen=True, slots=True)
class ApiProject:
    """The project of the request's key, as the API uses it (`g.project`): read as two columns
    with the key, not as ORM objects (that was a tenth of a 50-call write's CPU)."""

    id: int
    price_overrides: dict[str, Any] | None


# Built once: the key's columns and its project's, by the key's hash.
_KEY_LOOKUP = (
    select(
        ApiKey.id,
        ApiKey.key_hash,
        ApiKey.revoked_at,
        ApiKey.last_used_at,
        Project.id.label("project_id"),
        Project.price_overrides,
    )
    .join(Project, Project.id == ApiKey.project_id)
    .where(ApiKey.key_hash == bindparam("key_hash"))
)


def authenticate_api_key() -> ApiProject:
    """Resolve the request's Bearer key to its project, or raise a 401 ApiError."""
    token = _bearer_token()
    if token is None:
        raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'")
    key_hash = hash_key(token)
    row = db.session.execute(_KEY_LOOKUP, {"key_hash": key_hash}).first()
    if row is None or row.revoked_at is not None or not hmac.compare_digest(
        row.key_hash, key_hash
    ):
        raise ApiError(401, "invalid or revoked API key")
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        _touch_last_used(row.id, now)
    project = ApiProject(row.project_id, row.price_overrides)
    g.project = project
    g.api_key_id = row.id
    return project


def _touch_last_used(key_id: int, now: Any) -> None:
    """Record the key's use; losing this update under contention is harmless.

    A read request runs in a deferred SQLite transaction, and upgrading it to a writer fails at
    once ("database is locked") while another request writes. The SAVEPOINT keeps that failure
    from spoiling the request's own transaction (PostgreSQL aborts a transaction on any error).
    """
    try:
        with db.session.begin_nested():
            db.session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=now))
    except OperationalError:
        pass


def is_loopback(address: str | None) -> bool:
    try:
        return address is not None and ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


# The session cookie's key for the login token (see start_dashboard_session).
SESSION_TOKEN = "login_token"


def start_dashboard_session() -> None:
    """Log the browser in: a fresh session (nothing from before carries over) holding a new
    random token, whose hash is recorded. Logins older than the session lifetime are
    forgotten on the way."""
    now = utcnow()
    lifetime = current_app.permanent_session_lifetime
    db.session.execute(
        delete(DashboardSession).where(DashboardSession.created_at <= now - lifetime)
    )
    token = secrets.token_urlsafe(32)
    db.session.add(DashboardSession(token_hash=hash_key(token), created_at=now))
    session.clear()
    session[SESSION_TOKEN] = token


def end_dashboard_session() -> None:
    """Log out: the token is deleted, so a copy of the cookie no longer logs anyone in."""
    token = session.get(SESSION_TOKEN)
    if isinstance(token, str):
        db.session.execute(
            delete(DashboardSession).where(DashboardSession.token_hash == hash_key(token))
        )
    session.clear()


def _logged_in() -> bool:
    """Whether the session's login token is recorded and younger than the session lifetime.

    One query, once per request, on a connection of its own: the request's transaction is
    still to be opened by its view, as a writer if it writes (see `db.begin_write`).
    """
    if "dashboard_logged_in" not in g:
        token = session.get(SESSION_TOKEN)
        created_at = None
        if isinstance(token, str):
            query = select(DashboardSession.created_at).where(
                DashboardSession.token_hash == hash_key(token)
            )
            with db.engine.connect() as connection:
                created_at = connection.scalar(query)
        g.dashboard_logged_in = (
            created_at is not None
            and utcnow() - created_at < current_app.permanent_session_lifetime
        )
    return g.dashboard_logged_in


def dashboard_login_needed() -> bool:
    """True when the current browser request must log in first."""
    if current_app.config["DEV"] and is_loopback(request.remote_addr):
        return False
    return not _logged_in()


def check_password(candidate: str) -> bool:
    expected = current_app.config.get("PASSWORD")
    return bool(expected) and hmac.compare_digest(candidate.encode(), expected.encode())
