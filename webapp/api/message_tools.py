"""The endpoints of `unique_sdk`'s MessageTool API, so the real `unique_sdk` can point here.

A call removed by a `skip` redaction rule is not stored, so the answer to a POST leaves it
out: the answer lists exactly what a later GET will return.
"""

from __future__ import annotations

from flask import current_app, g, jsonify, request
from flask_openapi3 import Tag

from ..ingest import (
    Invalid,
    PreparedToolBatch,
    WriteContext,
    prepare_message_tools,
    store_message_tools,
)
from ..ingest.transaction import Write
from ..queries.messages import message_tools
from . import bp, drafts, serializers
from .endpoint import endpoint, write_context
from .schemas import (
    UNIQUE_API_WRITE_ERRORS,
    MessageToolList,
    MessageToolsCreate,
    MessageToolsQuery,
    error_responses,
)

TAG = Tag(
    name="MessageTool",
    description="Compatible with the MessageTool API of unique_sdk. Every request error is a "
    "400 (the SDK's InvalidRequestError); `error.code` says which.",
)


@bp.post(
    "/messages/tools",
    tags=[TAG],
    summary="Store a batch of tool calls (and responses) of one message",
    responses={201: MessageToolList, **UNIQUE_API_WRITE_ERRORS},
)
@endpoint(write=True, prepares=True, unique_api=True)
def message_tools_post(body: MessageToolsCreate):
    """Idempotent: a retried batch is stored once; a later post may add responses. An
    unknown messageId makes a placeholder message, attached when its conversation's
    messages arrive. At most MAX_TOOLS_PER_REQUEST tools."""
    drafts.check_count("tools", len(body.tools), "MAX_TOOLS_PER_REQUEST", "tools")
    ctx = write_context()
    batch = prepare_message_tools(ctx, body.messageId, drafts.sdk_calls(body.tools))
    return Write(_store_tools, (ctx, batch))


def _store_tools(ctx: WriteContext, batch: PreparedToolBatch):
    """The write of a MessageTool batch, and the answer: the calls as stored."""
    rows = store_message_tools(ctx, batch)
    data = serializers.message_tools(rows, batch.message_external_id)
    return serializers.fast_json(serializers.listing(data), 201)


@bp.get(
    "/messages/tools",
    tags=[TAG],
    summary="Tool calls of several messages",
    responses={200: MessageToolList, **error_responses(400)},
)
@endpoint(unique_api=True)
def message_tools_get(query: MessageToolsQuery):
    """`messageIds` is comma-separated (URL-encoded commas are fine, the parameter may also
    be repeated). Unknown ids, and ids of other projects, simply return nothing."""
    ids = _message_ids(request.args.getlist("messageIds"))
    rows = message_tools(g.project.id, ids)
    data = [serializers.message_tool(r, r["message_external_id"]) for r in rows]
    return jsonify(serializers.listing(data))


def _message_ids(values: list[str]) -> list[str]:
    ids = list(dict.fromkeys(part.strip() for v in values for part in v.split(",")))
    ids = [i for i in ids if i]
    limit = current_app.config["MAX_IDS_PER_REQUEST"]
    if len(ids) > limit:
        raise Invalid(
            "query.messageIds",
            f"{len(ids)} message ids in one request; the limit is {limit}",
            limit=limit,
        )
    return ids
