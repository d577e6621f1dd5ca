"""``GET /api/v1/conversations/<cid>/replay``: the replay export, for agents and scripts.

Registered on a blueprint of its own under /api/v1, set up like ``webapp.api``'s (Bearer keys,
CSRF exempt, documented in /api/openapi.json from the pydantic models below); inputs are read
and the key checked by ``webapp.api.endpoint``.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response, g, jsonify
from flask_openapi3 import APIBlueprint, OpenAPI, Tag
from pydantic import BaseModel, ConfigDict, Field

from .. import csrf
from ..api import API_PREFIX
from ..api.endpoint import endpoint
from ..api.schemas import ANY_REQUEST_ERRORS, ConversationPath, error_responses
from ..db import utcnow
from ..errors import ApiError
from ..replay_export import OptionError, ReplayQuery, download_filename
from . import service

TAG = Tag(
    name="Replay",
    description="The payload an LLM would receive on the next turn, and why each stored call "
    "was or was not included.",
)


class DiagnosticOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="e.g. stale, response_missing, trailing_trimmed, pruned.")
    reason: str
    message_id: str | None
    round_index: int | None
    call_row_id: int | None
    call_id: str | None
    detail: dict[str, Any]


class ProblemOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str
    message: str
    path: str


class ConversationRefOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    channel: str | None


class ReplayExportOut(BaseModel):
    """The export document (schema_version 1). `payload` is accepted by the provider as is and
    can be posted back to `/conversations/{cid}/import` with `format`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int
    conversation: ConversationRefOut
    as_of: str | None
    format: str
    options: dict[str, Any] = Field(description="The options as requested and resolved.")
    payload: dict[str, Any]
    diagnostics: list[DiagnosticOut]
    stats: dict[str, Any]
    next_source_number: int
    validation: list[ProblemOut] = Field(description="Provider rules our payload breaks: [].")
    naive_replay_problems: list[ProblemOut] = Field(
        description="What replaying the raw stored rows would break."
    )


def create_blueprint() -> APIBlueprint:
    bp = APIBlueprint(
        "replay_api",
        __name__,
        url_prefix=API_PREFIX,
        abp_security=[{"bearer": []}],
        abp_responses=error_responses(*ANY_REQUEST_ERRORS),
    )

    @bp.get(
        "/conversations/<cid>/replay",
        tags=[TAG],
        summary="Replay a conversation as a provider payload, with diagnostics",
        responses={200: ReplayExportOut, **error_responses(404, 422)},
    )
    @endpoint()
    @service.without_cyclic_gc
    def replay_get(path: ConversationPath, query: ReplayQuery):
        """The replay built from the stored rows as of `as_of`, in `format`. A constant number
        of queries whatever the size of the conversation. `download=true` answers with
        `Content-Disposition: attachment; filename="replay-<cid>-<format>.json"`."""
        conversation = service.find_conversation(g.project.id, external_id=path.cid)
        if conversation is None:
            raise ApiError(404, "no such conversation in this project")
        try:
            built = service.build(conversation, service.load(conversation), query, utcnow())
        except OptionError as exc:
            field = f"query.{exc.field}"
            details = [{"field": field, "message": exc.message}]
            raise ApiError(422, f"{field}: {exc.message}", details) from None
        document = built.document()
        if not query.download:
            return jsonify(document)
        return download_response(document, conversation.info.external_id, query.format)

    return bp


def download_response(document: dict[str, Any], conversation_id: str, fmt: str) -> Response:
    """The document as a file: indented for people, named after the conversation and format."""
    body = json.dumps(document, indent=2, ensure_ascii=False)
    filename = download_filename(conversation_id, fmt)
    return Response(
        body,
        mimetype="application/json",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def register(app: OpenAPI) -> None:
    bp = create_blueprint()
    # Bearer keys, never cookies: CSRF tokens do not apply (as for webapp.api).
    csrf.exempt(bp)
    app.register_api(bp)
