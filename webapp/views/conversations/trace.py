"""The trace view of a conversation: the OTLP spans behind its messages (name, kind, timing,
status, attributes), as a page and its JSON twin, long values cut; and one span's page with its
attributes, events, links and resource in full. Four queries whatever the size."""

from __future__ import annotations

import json

from flask import url_for

from ...queries import otel as otel_queries
from ...queries.conversations import find_conversation
from ..common import or_404, respond, twin_get
from ..context import current_project
from . import bp
from .trace_model import TRUNCATED, trace_groups


@twin_get(bp, "/conversations/<int:conversation_id>/trace")
def conversation_trace_get(conversation_id: int, fmt: str):
    """The spans of the conversation's traces, trace by trace (earliest first), each trace a tree
    of spans with its waterfall; the twin lists the traces (id, span count, duration) and the
    spans in the page's order with their depth, children and bar."""
    project = current_project()
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "conversation")
    spans, total = otel_queries.conversation_spans(project.id, conversation.id)

    def span_url(trace_id: str, span_id: str) -> str:
        return url_for(
            "conversations.conversation_trace_span_get",
            conversation_id=conversation.id,
            trace_id=trace_id,
            span_id=span_id,
        )

    traces = trace_groups(spans, span_url)
    data = {
        "conversation": conversation,
        "traces": traces,
        "spans": [row for trace in traces for row in trace.spans],
        "total": total,
        "limit": otel_queries.MAX_TRACE_SPANS,
    }
    return respond(
        data,
        page="conversations/trace.html",
        fmt=fmt,
        json_keys=("traces", "spans", "total", "limit"),
    )


@twin_get(bp, "/conversations/<int:conversation_id>/trace/<trace_id>/<span_id>")
def conversation_trace_span_get(conversation_id: int, trace_id: str, span_id: str, fmt: str):
    """One span of the conversation's traces with everything stored of it (each value bounded
    when stored), and what was cut then."""
    project = current_project()
    conversation = or_404(find_conversation(project.id, row_id=conversation_id), "conversation")
    span = or_404(
        otel_queries.conversation_span(project.id, conversation.id, trace_id, span_id), "span"
    )
    attributes = dict(span["attributes"] or {})
    truncated = attributes.pop(TRUNCATED, None)
    data = {
        "conversation": conversation,
        "span": {**span, "attributes": attributes},
        "truncated": truncated,
        "text": json.dumps(
            {k: span[k] for k in ("resource", "events", "links")} | {"attributes": attributes},
            indent=1,
            ensure_ascii=False,
            sort_keys=True,
            default=str,
        ),
    }
    return respond(
        data, page="conversations/trace_span.html", fmt=fmt, json_keys=("span", "truncated")
    )
