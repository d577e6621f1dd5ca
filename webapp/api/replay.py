"""``GET /api/v1/conversations/<cid>/replay``: the replay export, for agents and scripts.

Documented in /api/openapi.json from the pydantic models below; inputs are read and the key
checked by ``webapp.api.endpoint``, as for every API route.
"""

from __future__ import annotations

from typing import Any

from flask import Response, g, jsonify
from flask_openapi3 import Tag
from pydantic import BaseModel, ConfigDict, Field

from ..db import utcnow
from ..errors import ApiError
from ..queries import replay_cache
from ..queries.conversations import find_conversation
from ..queries.histories import load_history
from ..queries.replay_cache import (
    body_response,
    download_encoder,
    download_response,
    dumps_json,
    encode_json,
    plain_json,
)
from ..replay.export import OptionError, ReplayQuery, download_filename
from ..replay.gc_pause import gc_paused
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
            body = replay_cache.answer(
                conversation, query, "download", download_encoder(conversation), now=utcnow()
            )
            return download_response(body, filename)
        if plain_json():
            body = replay_cache.answer(conversation, query, "json", encode_json, now=utcnow())
            return body_response(body)
        # Another JSON provider (debug's indented output): Flask's own path, never cached.
        built = replay_cache.build(conversation, load_history(conversation), query, utcnow())
        return json_response(built.document(), text_messages=built.result.text_messages)
    except OptionError as exc:
        field = f"query.{exc.field}"
        details = [{"field": field, "message": exc.message}]
        raise ApiError(422, f"{field}: {exc.message}", details) from None


def json_response(document: dict[str, Any], *, text_messages: bool = False) -> Response:
    """``jsonify(document)``, the same bytes, encoded by ``jsonfast.dumps_ascii`` (less than
    half the time for a large replay) and sent as it was encoded, in one piece: the answer is in
    memory once, not also as the text it was made from nor copied to add the final newline.
    ``text_messages``: the replay vouches that its payload's message list is text only
    (``ReplayResult.text_messages``), so the encoder's walk leaves it out."""
    if not plain_json():  # another provider or indented output (debug): Flask's own path
        return jsonify(document)
    return body_response((dumps_json(document, text_messages=text_messages),))
