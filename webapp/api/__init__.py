"""The JSON API under /api/v1: ingestion (MessageTool-compatible and native), reads, the replay
export and settings, all on one blueprint.

Each module declares its routes on ``bp`` when it is imported (``conversations``, ``channels``,
``message_tools``, ``replay``, ``otel``); the OTLP receivers (``otlp``) have a blueprint of
their own, outside /api/v1; ``webapp.api.endpoint`` reads every view's input and checks its
key. ``register(app)`` is called by the app factory. The OpenAPI document is served at
/api/openapi.json and the offline Swagger UI at /api/swagger (flask-openapi3).
"""

from __future__ import annotations

from flask import Response, request
from flask_openapi3 import APIBlueprint, OpenAPI

from .schemas import ANY_REQUEST_ERRORS, error_responses

bp = APIBlueprint(
    "api",
    __name__,
    url_prefix="/api/v1",
    abp_security=[{"bearer": []}],
    abp_responses=error_responses(*ANY_REQUEST_ERRORS),
)

from . import (  # noqa: E402,F401  (routes on bp)
    calls,
    channels,
    conversations,
    message_tools,
    meta,
    model_connections,
    otel,
    otlp,
    replay,
    runs,
    studies,
)


def register(app: OpenAPI) -> None:
    # The API authenticates with Bearer keys, never cookies: CSRF tokens do not apply.
    app.extensions["csrf"].exempt(bp)
    app.register_api(bp)
    # OTLP/HTTP receivers: /v1/traces, /v1/logs, /v1/metrics and their /api/otlp aliases.
    app.extensions["csrf"].exempt(otlp.bp)
    app.register_api(otlp.bp)
    # Swagger UI would fetch a validity badge from validator.swagger.io: keep the docs offline.
    app.config.setdefault("SWAGGER_CONFIG", {"validatorUrl": None})
    app.after_request(_no_sniffing)


def _no_sniffing(response: Response) -> Response:
    """Every answer under /api/ (errors of unknown paths and the OpenAPI document included) is
    what its Content-Type says: a browser must not guess HTML from agent content in JSON."""
    if request.path.startswith("/api/"):
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response
