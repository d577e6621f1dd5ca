"""``GET /api/v1/conversations/<cid>/replay``: the replay export, for agents and scripts.

Documented in /api/openapi.json from the pydantic models below; inputs are read and the key
checked by ``webapp.api.endpoint``, as for every API route.
"""

from __future__ import annotations

from typing import Any

from flask import Response, current_app, g, jsonify
from flask.json.provider import DefaultJSONProvider
from flask_openapi3 import Tag
from pydantic import BaseModel, ConfigDict, Field

from ..db import utcnow
from ..errors import ApiError
from ..queries.conversations import find_conversation
from ..queries.histories import load_history
from ..replay.export import OptionError, ReplayQuery, build_replay, export_file
from ..replay.gc_pause import gc_paused
from ..replay.jsonfast import dumps_ascii
from ..tokens import STORED_COUNTER
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
    loaded = load_history(conversation)
    try:
        built = build_replay(
            conversation,
            loaded.history,
            query,
            now=utcnow(),
            count_tokens=loaded.token_counter(),
            token_counter=STORED_COUNTER,
            known_objects=loaded.object_arguments,
        )
    except OptionError as exc:
        field = f"query.{exc.field}"
        details = [{"field": field, "message": exc.message}]
        raise ApiError(422, f"{field}: {exc.message}", details) from None
    document = built.document()
    if not query.download:
        return json_response(document, text_messages=built.result.text_messages)
    text, filename = export_file(document, conversation.external_id, query.format)
    return Response(
        text,
        mimetype="application/json",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def json_response(document: dict[str, Any], *, text_messages: bool = False) -> Response:
    """``jsonify(document)``, the same bytes, encoded by ``jsonfast.dumps_ascii`` (less than
    half the time for a large replay) and sent as it was encoded, in one piece: the answer is in
    memory once, not also as the text it was made from nor copied to add the final newline.
    ``text_messages``: the replay vouches that its payload's message list is text only
    (``ReplayResult.text_messages``), so the encoder's walk leaves it out."""
    provider = current_app.json
    plain = (
        type(provider) is DefaultJSONProvider
        and provider.ensure_ascii
        and not provider.sort_keys
        and not (provider.compact is False or (provider.compact is None and current_app.debug))
    )
    if not plain:  # another provider or indented output (debug): Flask's own path
        return jsonify(document)
    walk = _without_messages(document) if text_messages else document
    body = dumps_ascii(document, default=provider.default, newline=True, walk=walk)
    # A one-item list: Response(bytes) would be fine too; the list keeps werkzeug from
    # touching the body, and the length is known.
    response = Response([body], mimetype=provider.mimetype)
    response.content_length = len(body)
    return response


def _without_messages(document: dict[str, Any]) -> dict[str, Any]:
    """The export document with an empty message list: what the encoder walks when the
    replay vouched for its messages (two shallow copies, nothing else copied)."""
    payload = document["payload"]
    key = "input" if document["format"] == "openai-responses" else "messages"
    return {**document, "payload": {**payload, key: []}}
