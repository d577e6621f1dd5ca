"""The trace view of a conversation: the OTLP spans behind its messages (name, kind, timing,
status, attributes), as a page and its JSON twin. Four queries whatever the size."""

from __future__ import annotations

from ...queries import otel as otel_queries
from ...queries.conversations import find_conversation
from ..common import or_404, respond, twin_get
from ..context import current_project
from . import bp
from .trace_model import span_rows


@twin_get(bp, "/conversations/<int:conversation_id>/trace")
def conversation_trace_get(conversation_id: int, fmt: str):
    """The spans of the conversation's traces, earliest first, as a tree."""
    project = current_project()
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "conversation")
    spans, total = otel_queries.conversation_spans(project.id, conversation.id)
    data = {
        "conversation": conversation,
        "spans": span_rows(spans),
        "total": total,
        "limit": otel_queries.MAX_TRACE_SPANS,
    }
    return respond(
        data, page="conversations/trace.html", fmt=fmt, json_keys=("spans", "total", "limit")
    )
