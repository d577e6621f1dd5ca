"""The call detail panel: arguments and response pretty-printed, sizes, tokens, timestamps,
copy buttons and a link to the call in the replay preview."""

from __future__ import annotations

import json

from flask import Response, current_app

from ...db import utcnow
from ...queries import calls as queries
from ..common import or_404, respond, twin_get
from ..context import current_project
from ..highlight import render_text, render_value
from . import bp
from . import timeline_model as model
from .address import conversation_address
from .badges import call_badges, citations


def _raw_text(detail: queries.CallDetail, field: str) -> str | None:
    if field == "arguments":
        args = detail.call.arguments
        return None if args is None else json.dumps(args, indent=2, ensure_ascii=False)
    return detail.response


def _detail_data(detail: queries.CallDetail) -> dict:
    call = detail.call
    cap = current_app.config["REPLAY_RESULT_TOKEN_CAP"]
    return {
        "call": call,
        "detail": detail,
        "badges": call_badges(
            call,
            now=utcnow(),
            freshness_seconds=detail.freshness_seconds,
            token_cap=cap,
            cited=citations(detail.message_content),
            imported=detail.message_imported,
        ),
        "duration_ms": model.call_duration_ms(call),
        "arguments": render_value(call.arguments, tree=True),
        "response": render_text(detail.response, tree=True),
        "response_text": detail.response,
        "token_method": detail.token_method,
        "arguments_bytes": detail.arguments_bytes,
        # How the call went through MCP (docs/otlp-mapping.md, 'MCP calls'), or None.
        "mcp": detail.mcp,
        # Both ids of the call's conversation (None: the call is not attached yet).
        "conversation": (
            {
                "id": detail.conversation_id,
                "external_id": detail.conversation_external_id,
                "address": conversation_address(detail.conversation_external_id or ""),
            }
            if detail.conversation_id is not None
            else None
        ),
    }


@twin_get(bp, "/calls/<bigint:call_id>")
def call_get(call_id: int, fmt: str):
    """The detail panel (htmx), a page of its own, or the call as JSON."""
    detail = or_404(queries.get_call(current_project().id, call_id), "tool call")
    data = _detail_data(detail)
    return respond(
        data,
        page="conversations/call.html",
        fragment="conversations/_call_detail.html",
        fmt=fmt,
        json_keys=(
            "call",
            "response_text",
            "badges",
            "duration_ms",
            "token_method",
            "conversation",
            "mcp",
        ),
    )


@bp.get("/calls/<bigint:call_id>/<any(arguments, response):field>")
def call_field_get(call_id: int, field: str):
    """One folded field in full ("show all")."""
    detail = or_404(queries.get_call(current_project().id, call_id), "tool call")
    content = (
        render_value(detail.call.arguments, limit=None, tree=True)
        if field == "arguments"
        else render_text(detail.response, limit=None, tree=True)
    )
    data = {
        "call": detail.call,
        "detail": detail,
        "field": field,
        "content": content,
        "content_id": f"call-{call_id}-{field}",
    }
    return respond(
        data, page="conversations/call_field.html", fragment="conversations/_content.html"
    )


@bp.get("/calls/<bigint:call_id>/<any(arguments, response):field>.txt")
def call_field_text_get(call_id: int, field: str):
    """The field as plain text, for the copy buttons (never rendered as HTML)."""
    detail = or_404(queries.get_call(current_project().id, call_id), "tool call")
    text = _raw_text(detail, field)
    return Response(
        text or "", mimetype="text/plain", headers={"X-Content-Type-Options": "nosniff"}
    )
