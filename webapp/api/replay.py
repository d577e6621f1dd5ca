"""``GET /api/v1/conversations/<cid>/replay``: the replay export, for agents and scripts.

Documented in /api/openapi.json from the pydantic models below; inputs are read and the key
checked by ``webapp.api.endpoint``, as for every API route.
"""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, g, jsonify
from flask_openapi3 import Tag
from pydantic import BaseModel, ConfigDict, Field

from ..db import utcnow
from ..errors import ApiError
from ..queries.conversations import find_conversation
from ..replay.export import NoSuchTurn, OptionError, ReplayQuery, download_filename
from ..replay.gc_pause import gc_paused
from ..services import replay_answer
from ..services.replay_answer import download_encoder, dumps_json, encode_json, plain_json
from . import bp
from .endpoint import endpoint
from .schemas import ConversationPath, error_responses

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


@bp.get(
    "/conversations/<cid>/replay",
    tags=[TAG],
    summary="Replay a conversation as a provider payload, with diagnostics",
    responses={200: ReplayExportOut, **error_responses(404, 422)},
)
@endpoint()
@gc_paused()
def replay_get(path: ConversationPath, query: ReplayQuery):
    """The replay built from the stored rows as of `as_of`, in `format`. A constant number
    of queries whatever the size of the conversation. `download=true` answers with
    `Content-Disposition: attachment; filename="replay-<cid>-<format>.json"`."""
    conversation = find_conversation(g.project.id, external_id=path.cid)
    if conversation is None:
        raise ApiError(404, "no such conversation in this project")
    try:
        if query.download:
            filename = download_filename(conversation.external_id, query.format)
            body = replay_answer.answer(
                conversation, query, "download", download_encoder(conversation), now=utcnow()
            )
            return download_response(body, filename)
        if _plain_json():
            body = replay_answer.answer(conversation, query, "json", encode_json, now=utcnow())
            return body_response(body)
        # Another JSON provider (debug's indented output): Flask's own path, never cached.
        loaded = replay_answer.load(conversation)
        return jsonify(replay_answer.build(conversation, loaded, query, utcnow()).document())
    except OptionError as exc:
        field = f"query.{exc.field}"
        details = [{"field": field, "message": exc.message}]
        # A turn the conversation does not have is not there, as a conversation may not be.
        status = 404 if isinstance(exc, NoSuchTurn) else 422
        raise ApiError(status, f"{field}: {exc.message}", details) from None


def json_response(document: dict[str, Any], *, text_messages: bool = False) -> Response:
    """``jsonify(document)``, the same bytes, encoded by ``jsonfast.dumps_ascii`` (less than
    half the time for a large replay) and sent as it was encoded, in one piece: the answer is in
    memory once, not also as the text it was made from nor copied to add the final newline.
    ``text_messages``: the payload's message list is text only
    (``services.replay_answer.text_only_messages``), so the encoder's walk leaves it out."""
    if not _plain_json():  # another provider or indented output (debug): Flask's own path
        return jsonify(document)
    return body_response((dumps_json(document, text_messages=text_messages),))


def _plain_json() -> bool:
    return plain_json(current_app.json, current_app.debug)


def body_response(body: replay_answer.Body) -> Response:
    """An encoded JSON answer, sent as its chunks are (the bytes ``jsonify`` sends)."""
    return _chunks_response(body, current_app.json.mimetype)


def download_response(body: replay_answer.Body, filename: str) -> Response:
    """The download's answer: what ``Response(export_file text)`` with its attachment header
    sends."""
    disposition = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return _chunks_response(body, "application/json", disposition)


def _chunks_response(
    body: replay_answer.Body, mimetype: str, headers: dict[str, str] | None = None
) -> Response:
    # A list: werkzeug then sends the chunks as they are, and the length is known.
    response = Response(list(body), mimetype=mimetype, headers=headers)
    response.content_length = sum(map(len, body))
    return response
