"""Whole writes, as the API views make them: a message batch, or a MessageTool batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from ..db import db
from ..models import RedactionRule
from ..redaction import CompiledRules, Rule, compile_rules
from .calls import CallBatch, CallDraft, prepare_calls, store_calls
from .conversations import touch_conversations
from .messages import MessageDraft, check_distinct_ids, message_for_tools, upsert_messages
from .usage import store_usage
from .values import clean_text


def load_rules(project_id: int) -> CompiledRules:
    """The project's enabled redaction rules, in one query; compiled once per distinct set."""
    rows = db.session.execute(
        select(
            RedactionRule.name,
            RedactionRule.kind,
            RedactionRule.value,
            RedactionRule.function_name,
        )
        .where(RedactionRule.project_id == project_id, RedactionRule.enabled.is_(True))
        .order_by(RedactionRule.id)
    ).all()
    rules = tuple(
        Rule(r.name, r.kind, tuple(str(v) for v in (r.value or ())), r.function_name) for r in rows
    )
    return compile_rules(rules)


@dataclass
class WriteContext:
    """What every write of one request shares: who, when, and the project's rules and limits."""

    project_id: int
    now: datetime
    rules: CompiledRules
    max_result_bytes: int
    price_overrides: Mapping[str, Any] | None = None


def store_messages(
    ctx: WriteContext,
    conversation_id: int,
    conversation_label: str,
    drafts: Sequence[MessageDraft],
) -> list[dict[str, Any]]:
    """Messages with their calls and usage into one conversation; the stored message rows.

    Statements: messages 1-3, calls 1-3, usage 0-3, and the conversation's UPDATE last.
    """
    check_distinct_ids(drafts)
    prepared = []
    for position, draft in enumerate(drafts):
        draft.content = clean_text(draft.content)
        # Messages without a time keep the request's order: each a microsecond after the last.
        draft.created_at = draft.created_at or ctx.now + timedelta(microseconds=position)
        calls = prepare_calls(
            draft.calls,
            ctx.rules,
            model=draft.model,
            now=ctx.now,
            max_result_bytes=ctx.max_result_bytes,
        )
        prepared.append((draft, calls))
    stored = upsert_messages(ctx.project_id, conversation_id, conversation_label, drafts, ctx.now)
    store_calls(
        ctx.project_id,
        [
            CallBatch(stored[d.external_id]["id"], d.external_id, calls)
            for d, calls in prepared
            if calls
        ],
    )
    store_usage(
        [(stored[d.external_id], u) for d in drafts for u in d.usage],
        ctx.price_overrides,
        ctx.now,
    )
    touch_conversations([conversation_id], ctx.now)
    return [stored[d.external_id] for d in drafts]


def store_message_tools(
    ctx: WriteContext, message_external_id: str, drafts: Sequence[CallDraft]
) -> list[dict[str, Any]]:
    """A MessageTool batch: calls of one message, which may not be in a conversation yet."""
    message = message_for_tools(ctx.project_id, message_external_id, ctx.now)
    calls = prepare_calls(
        drafts,
        ctx.rules,
        model=message["model"],
        now=ctx.now,
        max_result_bytes=ctx.max_result_bytes,
    )
    rows = store_calls(ctx.project_id, [CallBatch(message["id"], message_external_id, calls)])
    if message["conversation_id"] is not None:
        touch_conversations([message["conversation_id"]], ctx.now)
    return rows[message["id"]]
