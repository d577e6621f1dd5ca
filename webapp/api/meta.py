"""`GET /meta`: the API version and the request limits this server enforces.

Clients (toolscope-client) ask once and split their requests to fit, instead of hard-coding
copies of the settings. The limits are the running server's settings, so a deployment that
lowers `TOOLSCOPE_MAX_TOOLS_PER_REQUEST` is followed by its clients.
"""

from __future__ import annotations

from typing import Literal

from flask import current_app, jsonify
from flask_openapi3 import Tag
from pydantic import BaseModel, ConfigDict

from ..version import __version__
from . import bp
from .endpoint import endpoint
from .schemas import ErrorOut

# The version in the URL prefix (/api/v1); toolscope-client 1.x speaks it.
API_VERSION = 1

TAG = Tag(name="Meta", description="API version and request limits, for clients.")
# Answer field -> setting, in the order the answer lists them.
LIMIT_SETTINGS = {
    "max_tools_per_request": "MAX_TOOLS_PER_REQUEST",
    "max_ids_per_request": "MAX_IDS_PER_REQUEST",
    "max_messages_per_request": "MAX_MESSAGES_PER_REQUEST",
    "max_body_bytes": "MAX_BODY_BYTES",
    "max_result_bytes": "MAX_RESULT_BYTES",
}


class LimitsOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tools_per_request: int
    max_ids_per_request: int
    max_messages_per_request: int
    max_body_bytes: int
    max_result_bytes: int


class MetaOut(BaseModel):
    """Like every answer model, `extra="forbid"` lets a test prove the answer lists it all."""

    model_config = ConfigDict(extra="forbid")

    object: Literal["meta"]
    api_version: int
    server_version: str
    limits: LimitsOut


def meta_answer() -> dict:
    config = current_app.config
    return {
        "object": "meta",
        "api_version": API_VERSION,
        "server_version": __version__,
        "limits": {field: config[setting] for field, setting in LIMIT_SETTINGS.items()},
    }


@bp.get(
    "/meta",
    tags=[TAG],
    summary="API version and request limits",
    responses={200: MetaOut, 401: ErrorOut},
)
@endpoint()
def meta_get():
    """The limits are the server's settings (`TOOLSCOPE_MAX_*`); clients split their requests to
    fit them."""
    return jsonify(meta_answer())
