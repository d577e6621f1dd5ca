"""Model connections: a project's named connections to model providers (docs/runs.md, 'Model
connections'), their secrets encrypted at rest, and the one place that hands a secret out.

A connection's API key is either typed in, stored as a Fernet token under a key derived from
the app's SECRET_KEY (HKDF-SHA256, a fixed salt and info), or named as an environment variable
of the server (`secret_env`), read when the connection is used. Its extra headers are
encrypted the same way (gateways put keys in headers). `MultiFernet` decrypts with the current
key and with each of PREVIOUS_SECRET_KEYS, so a changed SECRET_KEY keeps old tokens readable
until `toolscope connections rotate` (`rotate_all`) re-encrypts them under the current one.

Nothing here returns a secret but `resolve_connection`, whose `ResolvedConnection` keeps the
key out of its repr, for the provider's SDK (`make_client`). The records of `list_connections`
and every error message carry none. A connection's base URL is fetched by the server: its
scheme is http or https and, when MODEL_CONNECTION_ALLOWED_HOSTS is set, its host one of those
listed, checked when the connection is made and again whenever it is used.
"""

from __future__ import annotations

import base64
import functools
import importlib
import json
import os
import re
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flask import current_app
from sqlalchemy import delete, select

from ..db import db, utcnow
from ..ingest import Conflict, Invalid
from ..models import ModelConnection, Project

KINDS = ("openai", "anthropic")
# What a connection's name may be: it appears in URLs (DELETE .../model-connections/{name}).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,199}$")
# A header's name: an RFC 9110 token.
HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
MAX_HEADERS = 20
# What the HTTP client must set itself (framing, the host the allowed hosts were checked for).
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
MAX_HEADER_VALUE = 4096
MAX_SECRET = 4096
MAX_URL = 2048
# Environment variables a connection may not name: the server's own settings (SECRET_KEY,
# PASSWORD, DATABASE_URL) and the database's password. Anything else the server's environment
# holds can be sent to a connection's host by whoever may create connections: see docs/runs.md.
FORBIDDEN_ENV = re.compile(r"^(TOOLSCOPE_|PG|DATABASE_URL$)", re.IGNORECASE)

# HKDF's fixed inputs: the Fernet key depends on SECRET_KEY only, and on nothing else derived
# from it (session cookies, CSRF tokens) ever being the same bytes.
_HKDF_SALT = b"toolscope model connections"
_HKDF_INFO = b"toolscope.model_connection.secret.v1"

REENTER = (
    "it was encrypted under another SECRET_KEY (the key changed, or the instance folder's "
    "generated key was lost). Re-enter the key: delete the connection and add it again, or list "
    "the old key in TOOLSCOPE_PREVIOUS_SECRET_KEYS and run `toolscope connections rotate`"
)


# --- What callers get -----------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedConnection:
    """A connection ready to be called: the only object that holds its secret in plain text."""

    id: int
    name: str
    kind: str  # "openai" | "anthropic"
    base_url: str
    default_model: str | None
    headers: dict[str, str] = field(repr=False)
    api_key: str = field(repr=False)


class ConnectionNotFound(LookupError):
    """No connection of that name in the project."""


class ConnectionUnusable(ValueError):
    """The connection cannot be used now: its environment variable is unset, its secret cannot
    be decrypted, its host is not allowed. The message names the cause, never a secret."""


@dataclass(frozen=True)
class ConnectionRecord:
    """A connection as lists and pages show it: no secret, no header value."""

    id: int
    name: str
    kind: str
    base_url: str
    default_model: str | None
    header_names: tuple[str, ...] | None  # None: the headers cannot be decrypted
    has_secret: bool
    secret_source: str | None  # "stored" | "env" | None
    secret_env: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ConnectionDraft:
    """A connection as someone asked for it (API body, form, CLI), not yet checked."""

    name: str
    kind: str
    base_url: str
    default_model: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None


@dataclass(frozen=True)
class CheckResult:
    """What `check_connection` found: ok, or the provider's status (None: no answer) and its
    message with any secret of the connection taken out."""

    ok: bool
    message: str
    status: int | None = None
    models: tuple[str, ...] = ()


# --- Hosts and URLs (pure) ------------------------------------------------------------------


def parse_allowed_hosts(raw: str) -> tuple[str, ...]:
    """The MODEL_CONNECTION_ALLOWED_HOSTS setting: comma-separated hostnames or `*.domain`."""
    return tuple(h.strip().lower().rstrip(".") for h in raw.split(",") if h.strip())


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """Whether `host` is one of `allowed` (no entries: any host). `name` matches that host
    exactly, `*.domain` any host below domain (not domain itself); case and a final dot do not
    matter."""
    if not allowed:
        return True
    host = host.lower().rstrip(".")
    if not host:
        return False
    for pattern in allowed:
        pattern = pattern.lower().rstrip(".")
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                return True
        elif host == pattern:
            return True
    return False


def url_problem(url: str, allowed: Sequence[str]) -> str | None:
    """Why `url` cannot be a connection's base URL, or None."""
    if not url or len(url) > MAX_URL:
        return f"a URL of 1 to {MAX_URL} characters"
    if any(c.isspace() or ord(c) < 32 for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not parts.hostname:
        return "must name a host"
    if parts.username is not None or parts.password is not None:
        return "must not carry credentials (user:password@); give the key as the API key"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment; put keys in headers or the API key"
    del port
    if not host_allowed(parts.hostname, allowed):
        return (
            f"host {parts.hostname!r} is not allowed by MODEL_CONNECTION_ALLOWED_HOSTS "
            f"({', '.join(allowed)})"
        )
    return None


def env_problem(name: str) -> str | None:
    if not ENV_NAME_RE.match(name):
        return "an environment variable name: letters, digits and _, not starting with a digit"
    if FORBIDDEN_ENV.match(name):
        return "may not name the server's own settings (TOOLSCOPE_*, PG*, DATABASE_URL)"
    return None


def header_problem(name: str, value: str) -> str | None:
    if not HEADER_NAME_RE.match(name):
        return "a header name is letters, digits and !#$%&'*+.^_`|~- (up to 100)"
    if name.lower() in RESERVED_HEADERS:
        return f"{name} is set by the HTTP client, not by a connection"
    if len(value) > MAX_HEADER_VALUE or any(c in value for c in "\r\n\x00"):
        return f"a header value is one line of up to {MAX_HEADER_VALUE} characters"
    return None


def parse_header_lines(lines: Iterable[str]) -> dict[str, str]:
    """`Name: value` lines (the form's textarea, the CLI's --header) as a dict; raises Invalid."""
    headers: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise Invalid("headers", "one 'Name: value' per line")
        headers[name.strip()] = value.strip()
    return headers


# --- Encryption -----------------------------------------------------------------------------


def derive_fernet_key(secret: str | bytes) -> bytes:
    """The Fernet key for SECRET_KEY `secret` (HKDF-SHA256, fixed salt and info)."""
    material = secret.encode() if isinstance(secret, str) else secret
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=_HKDF_INFO).derive(
        material
    )
    return base64.urlsafe_b64encode(raw)


def cipher(secret: str | bytes, previous: Sequence[str] = ()) -> MultiFernet:
    """Encrypts under `secret`'s key; decrypts under it and each of `previous`."""
    keys = [secret, *(p for p in previous if p and p != secret)]
    return MultiFernet([Fernet(derive_fernet_key(k)) for k in keys])


def app_cipher() -> MultiFernet:
    config = current_app.config
    return cipher(config["SECRET_KEY"], config.get("PREVIOUS_SECRET_KEYS") or ())


def _encrypt(box: MultiFernet, plain: str) -> str:
    return box.encrypt(plain.encode()).decode("ascii")


def _decrypt(box: MultiFernet, token: str) -> str:
    return box.decrypt(token.encode("ascii")).decode()


# --- Writes ---------------------------------------------------------------------------------


def allowed_hosts() -> tuple[str, ...]:
    return tuple(current_app.config.get("MODEL_CONNECTION_ALLOWED_HOSTS") or ())


def prepare_connection(draft: ConnectionDraft) -> dict[str, Any]:
    """Check a draft and encrypt its secrets: the column values of the row to insert. Raises
    `Invalid` (422) naming the field; its message never holds a secret."""
    if not NAME_RE.match(draft.name or ""):
        raise Invalid(
            "name", "1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if draft.kind not in KINDS:
        raise Invalid("kind", f"one of {', '.join(KINDS)}")
    problem = url_problem(draft.base_url, allowed_hosts())
    if problem:
        raise Invalid("base_url", problem)
    model = (draft.default_model or "").strip() or None
    if model is not None and len(model) > 200:
        raise Invalid("default_model", "at most 200 characters")
    if len(draft.headers) > MAX_HEADERS:
        raise Invalid("headers", f"at most {MAX_HEADERS} headers")
    for name, value in draft.headers.items():
        problem = header_problem(name, value)
        if problem:
            raise Invalid("headers", problem)
    api_key = draft.api_key or None
    env = (draft.api_key_env or "").strip() or None
    if api_key is not None and env is not None:
        raise Invalid("api_key", "give either the API key or the environment variable, not both")
    if api_key is not None and (len(api_key) > MAX_SECRET or any(c in api_key for c in "\r\n\x00")):
        raise Invalid("api_key", f"one line of up to {MAX_SECRET} characters")
    if env is not None:
        problem = env_problem(env)
        if problem:
            raise Invalid("api_key_env", problem)
    box = app_cipher()
    now = utcnow()
    return {
        "name": draft.name,
        "kind": draft.kind,
        "base_url": draft.base_url,
        "default_model": model,
        "headers_encrypted": _encrypt(box, json.dumps(draft.headers)) if draft.headers else None,
        "secret_encrypted": _encrypt(box, api_key) if api_key is not None else None,
        "secret_env": env,
        "created_at": now,
        "updated_at": now,
    }


def store_connection(project_id: int, values: dict[str, Any]) -> ConnectionRecord:
    """The store step (run by `run_write`): insert the prepared row; 409 if the name is taken."""
    taken = db.session.scalar(
        select(ModelConnection.id).where(
            ModelConnection.project_id == project_id, ModelConnection.name == values["name"]
        )
    )
    if taken is not None:
        raise Conflict(
            f"a model connection named {values['name']!r} already exists in this project; "
            "delete it first to change it",
            [{"field": "name", "id": taken}],
        )
    row = ModelConnection(project_id=project_id, **values)
    db.session.add(row)
    db.session.flush()
    return _record(row, app_cipher())


def delete_connection(project_id: int, name: str) -> bool:
    """The store step of a delete: whether there was such a connection."""
    table = ModelConnection.__table__
    deleted = db.session.execute(
        delete(table)
        .where(table.c.project_id == project_id, table.c.name == name)
        .returning(table.c.id)
    ).first()
    return deleted is not None


@dataclass(frozen=True)
class RotationReport:
    rotated: int
    failed: tuple[str, ...]  # "project/name" of each connection that could not be decrypted


def rotate_all() -> RotationReport:
    """Re-encrypt every stored secret and header set under the current SECRET_KEY (the caller
    runs it in a write transaction and commits). What no known key decrypts is left as it is
    and named in the report."""
    box = app_cipher()
    rotated = 0
    failed: list[str] = []
    rows = db.session.execute(
        select(ModelConnection, Project.slug)
        .join(Project, Project.id == ModelConnection.project_id)
        .order_by(ModelConnection.id)
    ).all()
    for row, slug in rows:
        try:
            secret = box.rotate(row.secret_encrypted.encode()) if row.secret_encrypted else None
            headers = box.rotate(row.headers_encrypted.encode()) if row.headers_encrypted else None
        except InvalidToken:
            failed.append(f"{slug}/{row.name}")
            continue
        if secret is None and headers is None:
            continue
        row.secret_encrypted = secret.decode("ascii") if secret is not None else None
        row.headers_encrypted = headers.decode("ascii") if headers is not None else None
        row.updated_at = utcnow()
        rotated += 1
    db.session.flush()
    return RotationReport(rotated, tuple(failed))


# --- Reads ----------------------------------------------------------------------------------


def _record(row: ModelConnection, box: MultiFernet) -> ConnectionRecord:
    header_names: tuple[str, ...] | None = ()
    if row.headers_encrypted:
        try:
            header_names = tuple(json.loads(_decrypt(box, row.headers_encrypted)))
        except InvalidToken:
            header_names = None
    source = "stored" if row.secret_encrypted else "env" if row.secret_env else None
    return ConnectionRecord(
        id=row.id,
        name=row.name,
        kind=row.kind,
        base_url=row.base_url,
        default_model=row.default_model,
        header_names=header_names,
        has_secret=source is not None,
        secret_source=source,
        secret_env=row.secret_env,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def list_connections(session: Any, project_id: int) -> list[ConnectionRecord]:
    rows = session.scalars(
        select(ModelConnection)
        .where(ModelConnection.project_id == project_id)
        .order_by(ModelConnection.name)
    ).all()
    box = app_cipher()
    return [_record(row, box) for row in rows]


def resolve_connection(session: Any, project_id: int, name: str) -> ResolvedConnection:
    """The project's connection `name` with its secret and headers in plain text, for a call.

    Raises ConnectionNotFound, or ConnectionUnusable (environment variable unset, secret not
    decryptable with any known key, host no longer allowed): its message is safe to show."""
    row = session.scalar(
        select(ModelConnection).where(
            ModelConnection.project_id == project_id, ModelConnection.name == name
        )
    )
    if row is None:
        raise ConnectionNotFound(f"no model connection named {name!r} in this project")
    problem = url_problem(row.base_url, allowed_hosts())
    if problem:
        raise ConnectionUnusable(f"model connection {name!r}: base URL {problem}")
    box = app_cipher()
    headers: dict[str, str] = {}
    try:
        if row.headers_encrypted:
            headers = json.loads(_decrypt(box, row.headers_encrypted))
        api_key = _decrypt(box, row.secret_encrypted) if row.secret_encrypted else ""
    except InvalidToken:
        raise ConnectionUnusable(
            f"model connection {name!r}: its stored key cannot be decrypted: {REENTER}"
        ) from None
    if row.secret_env:
        problem = env_problem(row.secret_env)
        if problem:
            raise ConnectionUnusable(f"model connection {name!r}: environment variable {problem}")
        api_key = os.environ.get(row.secret_env, "")
        if not api_key:
            raise ConnectionUnusable(
                f"model connection {name!r}: the environment variable {row.secret_env} is not "
                "set on the server"
            )
    return ResolvedConnection(
        id=row.id,
        name=row.name,
        kind=row.kind,
        base_url=row.base_url,
        default_model=row.default_model,
        headers=headers,
        api_key=api_key,
    )


# --- Calls to the provider ------------------------------------------------------------------


def make_client(resolved: ResolvedConnection, *, timeout: float, max_retries: int) -> Any:
    """The provider's official SDK client for a connection: `openai.OpenAI` or
    `anthropic.Anthropic`, with explicit timeout and retries, and redirects not followed (a
    redirect to another host would carry the connection's headers there, around the allowed
    hosts; httpx drops only Authorization).

    The SDKs fill what they are not given from the server's environment (OPENAI_ORG_ID,
    OPENAI_PROJECT_ID, OPENAI_CUSTOM_HEADERS, ANTHROPIC_CUSTOM_HEADERS, the keys): a connection
    sends only what it holds, wherever it points, so those are taken out again."""
    if resolved.kind == "openai":
        import openai

        client = openai.OpenAI(
            base_url=resolved.base_url,
            # Never None: the SDK would read the server's own OPENAI_API_KEY instead.
            api_key=resolved.api_key or "none",
            default_headers=resolved.headers or None,
            timeout=timeout,
            max_retries=max_retries,
            http_client=openai.DefaultHttpxClient(
                follow_redirects=False, verify=_tls_context(openai.DefaultHttpxClient)
            ),
        )
        for attribute in ("organization", "project", "admin_api_key", "webhook_secret"):
            if getattr(client, attribute, None) is not None:
                setattr(client, attribute, None)
    elif resolved.kind == "anthropic":
        import anthropic

        client = anthropic.Anthropic(
            base_url=resolved.base_url,
            api_key=resolved.api_key or "none",
            default_headers=resolved.headers or None,
            timeout=timeout,
            max_retries=max_retries,
            http_client=anthropic.DefaultHttpxClient(
                follow_redirects=False, verify=_tls_context(anthropic.DefaultHttpxClient)
            ),
        )
        for attribute in ("auth_token", "webhook_key"):
            if getattr(client, attribute, None) is not None:
                setattr(client, attribute, None)
    else:
        raise ConnectionUnusable(
            f"model connection {resolved.name!r}: unknown kind {resolved.kind!r}"
        )
    # The headers the SDK adds of its own (version, platform) stay; any the environment added
    # go: the custom headers are the connection's alone.
    if getattr(client, "_custom_headers", None) != dict(resolved.headers):
        client._custom_headers = dict(resolved.headers)
    return client


@functools.cache
def _tls_context(client_class: type) -> ssl.SSLContext:
    """The TLS context that ``client_class`` (an SDK's ``DefaultHttpxClient``) would make for
    itself (its HTTP library's default: the system's trust store, or SSL_CERT_FILE), made
    once per process and shared: making it reads the whole CA bundle, tens of ms that every
    run's new client paid again (docs/benchmark.md, 'Runs and studies'). A context is safe
    to share between clients and threads; the connections themselves are not shared."""
    library = importlib.import_module(client_class.__mro__[1].__module__.partition(".")[0])
    return library.create_ssl_context()


def scrub(text: str, resolved: ResolvedConnection) -> str:
    """`text` with the connection's key and header values taken out (a provider may echo them
    in an error message)."""
    for secret in (resolved.api_key, *resolved.headers.values()):
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def check_connection(resolved: ResolvedConnection, *, timeout: float = 10.0) -> CheckResult:
    """List the provider's models through its SDK (no retries): ok with the first model ids, or
    the provider's status and message, or why no answer came."""
    import anthropic
    import openai

    errors = {"openai": openai, "anthropic": anthropic}[resolved.kind]
    try:
        client = make_client(resolved, timeout=timeout, max_retries=0)
        page = client.models.list()
        ids = tuple(str(getattr(m, "id", "")) for m in list(page.data)[:20])
    except errors.APIStatusError as exc:
        message = _provider_message(exc)
        return CheckResult(False, scrub(message, resolved)[:500], exc.status_code)
    except errors.APITimeoutError:
        return CheckResult(False, f"no answer within {timeout:g} s")
    except errors.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        return CheckResult(False, scrub(f"could not connect: {cause}", resolved)[:500])
    except errors.APIError as exc:  # an answer the SDK could not read
        return CheckResult(False, scrub(f"unexpected answer: {exc.message}", resolved)[:500])
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    count = f"{len(ids)} model{'' if len(ids) == 1 else 's'}"
    return CheckResult(True, f"{count} listed" + (f": {shown}" if ids else ""), 200, ids)


def _provider_message(exc: Any) -> str:
    """The provider's own error message (OpenAI's and Anthropic's `error.message`), else the
    SDK's."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
    return str(getattr(exc, "message", "") or exc)
