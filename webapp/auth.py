"""API keys (per project, shown once, stored as a hash) and the dashboard login guard."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
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


# The number the database bumps whenever what the API caches changes (models.ApiState).
_STATE_VERSION = "SELECT version FROM api_state WHERE id = 1"
# Entries per worker; only valid keys are kept, so this bounds memory, not correctness.
MAX_CACHED_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class _CachedKey:
    key_id: int
    project: ApiProject
    last_used_at: Any  # datetime | None, as last read or written


@dataclass(slots=True)
class ApiCache:
    """What one worker has read of the keys and rules, all as of one `api_state` version.

    A request checks that version with one single-row read (`state_version`): while it is the
    same, no key was revoked, moved or deleted, no price override and no rule changed, in any
    worker or server, since the entries were read. A different version drops everything.
    """

    version: int | None = None
    keys: dict[str, _CachedKey] = field(default_factory=dict)
    rules: dict[int, Any] = field(default_factory=dict)  # project id -> CompiledRules


def api_cache() -> ApiCache:
    """This app's cache (one per app: tests run several apps on different databases)."""
    cache = current_app.extensions.get("toolscope.api_cache")
    if cache is None:
        cache = current_app.extensions["toolscope.api_cache"] = ApiCache()
    return cache


def state_version() -> int:
    """The api_state version, read in the request's transaction (no row reads as 0)."""
    value = db.session.connection().exec_driver_sql(_STATE_VERSION).scalar()
    return int(value or 0)


def current_api_cache(version: int) -> ApiCache:
    """The cache as of `version`, read in this transaction before anything it will hold."""
    cache = api_cache()
    if cache.version != version:
        cache = current_app.extensions["toolscope.api_cache"] = ApiCache(version)
    return cache


def authenticate_api_key(*, defer_check: bool = False) -> ApiProject:
    """Resolve the request's Bearer key to its project, or raise a 401 ApiError.

    A key this worker has seen is taken from its cache after one read of the api_state
    version. With `defer_check=True` not even that: the caller must call `check_api_cache`
    in its write transaction (`g.api_cache_checked` is False until then) and start over if
    it answers False.
    """
    token = _bearer_token()
    if token is None:
        raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'")
    key_hash = hash_key(token)
    cache = api_cache()
    entry = cache.keys.get(key_hash)
    now = utcnow()
    if entry is not None and not _needs_touch(entry.last_used_at, now):
        if defer_check:
            g.api_cache_checked = False
            return _use(entry, cache.version)
        version = state_version()
        if version == cache.version:
            g.api_cache_checked = True
            return _use(entry, version)
        cache = current_api_cache(version)
    else:
        cache = current_api_cache(state_version())
    return _use(_read_key(cache, key_hash, now), cache.version)


def _needs_touch(last_used_at: Any, now: Any) -> bool:
    return last_used_at is None or now - last_used_at > LAST_USED_RESOLUTION


def _read_key(cache: ApiCache, key_hash: str, now: Any) -> _CachedKey:
    """The key from the database (after the version was read), cached if valid."""
    row = db.session.execute(_KEY_LOOKUP, {"key_hash": key_hash}).first()
    if row is None or row.revoked_at is not None or not hmac.compare_digest(
        row.key_hash, key_hash
    ):
        raise ApiError(401, "invalid or revoked API key")
    last_used_at = row.last_used_at
    if _needs_touch(last_used_at, now):
        _touch_last_used(row.id, now)
        # Even when the update lost to a writer: try again a minute later, not every request.
        last_used_at = now
    entry = _CachedKey(row.id, ApiProject(row.project_id, row.price_overrides), last_used_at)
    if len(cache.keys) >= MAX_CACHED_KEYS:
        cache.keys.clear()
    cache.keys[key_hash] = entry
    g.api_cache_checked = True
    return entry


def _use(entry: _CachedKey, version: int | None) -> ApiProject:
    g.project = entry.project
    g.api_key_id = entry.key_id
    g.api_cache_version = version
    return entry.project


def cached_for_request(project_id: int, read: Callable[[int], Any]) -> Any:
    """The project's compiled rules from this worker's cache, or `read(project_id)` kept there.

    Kept only under the version this request authenticated with: read (or, for a deferred
    check, checked later in the write) in a transaction before the rules were."""
    cache = api_cache()
    version = g.get("api_cache_version")
    current = version is not None and cache.version == version
    rules = cache.rules.get(project_id) if current else None
    if rules is None:
        rules = read(project_id)
        if current:
            cache.rules[project_id] = rules
    return rules


def check_api_cache() -> bool:
    """In the write transaction of a request authenticated with `defer_check`: whether the
    cache it used is still current. False: the caller rolls back and starts over."""
    if g.get("api_cache_checked", True):
        return True
    if state_version() == g.api_cache_version:
        g.api_cache_checked = True
        return True
    return False


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
