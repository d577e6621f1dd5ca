"""`/api/v1/model-connections`: a project's connections to model providers (docs/runs.md,
'Model connections').

Listing takes an API key (the key's project) or a dashboard login (the dashboard's current
project); creating and deleting take a dashboard login only (with the page's CSRF token in
`X-CSRFToken`): an API key may use a connection by name but never point one somewhere else. No
answer carries a secret or a header value: `has_secret`, `secret_source` and the environment
variable's name say where the key comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Literal, get_type_hints

from flask import current_app, g, jsonify, request, session
from flask_openapi3 import Tag
from flask_wtf.csrf import validate_csrf
from pydantic import BaseModel, ConfigDict, Field
from wtforms import ValidationError as CsrfError

from ..auth import authenticate_api_key, dashboard_login_needed
from ..db import db
from ..errors import ApiError
from ..ingest.transaction import Write, run_write
from ..queries.projects import find_project
from ..services import model_connections as connections
from . import bp, serializers
from .endpoint import _parse_inputs
from .schemas import NUL_FREE, WRITE_ERRORS, _Out, error_responses

TAG = Tag(
    name="Model connections",
    description="Named connections to model providers (OpenAI-compatible, Anthropic). Listed "
    "with an API key; created and deleted from the dashboard or the server's CLI only.",
)
# The dashboard's current project, as webapp.views.context keeps it in the session.
SESSION_PROJECT = "project_id"
DASHBOARD_ONLY = (
    "model connections are created and deleted only with a dashboard login or the server's "
    "CLI (`toolscope connections add`); an API key may list them and use them by name"
)


class ConnectionPath(BaseModel):
    name: str = Field(json_schema_extra={"minLength": 1, "maxLength": 100, **NUL_FREE})


class ModelConnectionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        description="Unique in the project; runs name the connection by it.",
        json_schema_extra={"pattern": connections.NAME_RE.pattern},
    )
    kind: Literal["openai", "anthropic"] = Field(
        description="`openai`: any OpenAI-compatible API (OpenAI, Azure-style gateways, vLLM, "
        "Ollama, LiteLLM, OpenRouter); `anthropic`: the Messages API."
    )
    base_url: str = Field(
        description="http(s) URL the SDK is pointed at, e.g. `https://api.openai.com/v1`; its "
        "host must be allowed by MODEL_CONNECTION_ALLOWED_HOSTS when that is set.",
        max_length=connections.MAX_URL,
        json_schema_extra=NUL_FREE,
    )
    default_model: str | None = Field(default=None, max_length=200, json_schema_extra=NUL_FREE)
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra headers sent with every call (stored encrypted, never shown again).",
    )
    api_key: str | None = Field(
        default=None,
        description="The key, stored encrypted under a key derived from the server's "
        "SECRET_KEY and never returned. Or give `api_key_env`, or neither (no key).",
        json_schema_extra={"writeOnly": True, **NUL_FREE},
    )
    api_key_env: str | None = Field(
        default=None,
        description="The name of an environment variable of the server that holds the key, "
        "read whenever the connection is used, e.g. `OPENAI_API_KEY`.",
        json_schema_extra=NUL_FREE,
    )


class ModelConnectionOut(_Out):
    id: int
    object: Literal["model_connection"]
    name: str
    kind: Literal["openai", "anthropic"]
    base_url: str
    default_model: str | None
    header_names: list[str] | None = Field(
        description="The extra headers' names (values are never shown); null: they cannot be "
        "decrypted with the server's SECRET_KEY (re-enter the connection)."
    )
    has_secret: bool
    secret_source: Literal["stored", "env"] | None
    secret_env: str | None
    created_at: str
    updated_at: str


class ModelConnectionList(_Out):
    object: Literal["list"]
    data: list[ModelConnectionOut]
    has_more: bool


def connection_document(record: connections.ConnectionRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "model_connection",
        "name": record.name,
        "kind": record.kind,
        "base_url": record.base_url,
        "default_model": record.default_model,
        "header_names": list(record.header_names) if record.header_names is not None else None,
        "has_secret": record.has_secret,
        "secret_source": record.secret_source,
        "secret_env": record.secret_env,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
    }


def _dashboard_project_id() -> int:
    project = find_project(session.get(SESSION_PROJECT), current_app.config["DEFAULT_PROJECT"])
    if project is None:
        raise ApiError(404, "no project yet: open the dashboard once, or create one")
    return project.id


def _caller_project(*, dashboard_only: bool) -> int:
    """The project the request acts on: its API key's (refused with 403 when `dashboard_only`)
    or, without an Authorization header, the logged-in dashboard's current project."""
    if request.headers.get("Authorization"):
        project = authenticate_api_key()
        if dashboard_only:
            raise ApiError(403, DASHBOARD_ONLY)
        return project.id
    if dashboard_login_needed():
        raise ApiError(
            401, "missing API key: send 'Authorization: Bearer <key>', or log in to the dashboard"
        )
    if dashboard_only:
        # The session cookie rides along with any request to this origin: a write with it needs
        # the page's CSRF token too (the API blueprint is exempt from the dashboard's check).
        try:
            validate_csrf(request.headers.get("X-CSRFToken") or request.headers.get("X-CSRF-Token"))
        except CsrfError as exc:
            raise ApiError(
                403, f"CSRF check failed: {exc}; send the page's token in X-CSRFToken"
            ) from None
    return _dashboard_project_id()


def _connection_view(*, dashboard_only: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like `endpoint.endpoint`, for the routes that also take a dashboard login."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        hints = get_type_hints(func)
        models = {name: hints[name] for name in ("path", "body") if name in hints}

        @wraps(func)
        def view(**path_kwargs: Any) -> Any:
            try:
                g.connection_project_id = _caller_project(dashboard_only=dashboard_only)
                db.session.commit()  # the key's last_used_at, if recorded; ends the read
                return func(**_parse_inputs(models, path_kwargs))
            except BaseException:
                db.session.rollback()
                raise

        view.__delay_validate_request__ = True  # type: ignore[attr-defined]
        return view

    return decorate


@bp.get(
    "/model-connections",
    tags=[TAG],
    summary="List model connections",
    responses={200: ModelConnectionList, **error_responses(404)},
)
@_connection_view(dashboard_only=False)
def model_connections_get():
    """The project's connections, without secrets: `has_secret` and `secret_source` (`stored`:
    typed in and stored encrypted; `env`: read from the server's environment variable
    `secret_env`)."""
    records = connections.list_connections(db.session, g.connection_project_id)
    db.session.commit()
    return jsonify(serializers.listing([connection_document(r) for r in records]))


@bp.post(
    "/model-connections",
    tags=[TAG],
    summary="Add a model connection (dashboard login only)",
    responses={201: ModelConnectionOut, **error_responses(403), **WRITE_ERRORS},
)
@_connection_view(dashboard_only=True)
def model_connections_post(body: ModelConnectionCreate):
    """Only with a dashboard login and its CSRF token (`X-CSRFToken`); an API key gets 403. 409
    when the name is taken (delete it first to change a connection)."""
    parsed = body
    values = connections.prepare_connection(
        connections.ConnectionDraft(
            name=parsed.name,
            kind=parsed.kind,
            base_url=parsed.base_url,
            default_model=parsed.default_model,
            headers=dict(parsed.headers),
            api_key=parsed.api_key,
            api_key_env=parsed.api_key_env,
        )
    )
    record = run_write(Write(connections.store_connection, (g.connection_project_id, values)))
    return jsonify(connection_document(record)), 201


@bp.delete(
    "/model-connections/<name>",
    tags=[TAG],
    summary="Delete a model connection (dashboard login only)",
    responses={204: None, **error_responses(403, 404, 422, 503)},
)
@_connection_view(dashboard_only=True)
def model_connection_delete(path: ConnectionPath):
    """Only with a dashboard login and its CSRF token; an API key gets 403."""
    name = path.name
    deleted = run_write(Write(connections.delete_connection, (g.connection_project_id, name)))
    if not deleted:
        raise ApiError(404, f"no model connection named {name!r} in this project")
    return "", 204
