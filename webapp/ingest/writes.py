"""Whole writes, as the API views make them: a message batch, or a MessageTool batch.

Each comes in two steps: `prepare_*` does the CPU work (redaction, measuring, token counts)
before the request takes the write lock, `store_*` runs only the SQL inside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from ..auth import cached_for_request
from ..db import db
from ..models import RedactionRule
from ..redaction import CompiledRules, Rule, compile_rules
from .calls import (
    CallBatch,
    CallDraft,
    PreparedCall,
    prepare_calls,
    store_calls,
)
from .conversations import touch_conversations
from .messages import (
    MessageDraft,
    check_distinct_ids,
    check_not_otlp_owned,
    message_for_tools,
    upsert_messages,
)
from .usage import store_usage
from .values import clean_text


def load_rules(project_id: int) -> CompiledRules:
    """The project's enabled redaction rules, compiled; read once per worker while the
    api_state version stays the same (`webapp.auth.cached_for_request`)."""
    return cached_for_request(project_id, _read_rules)


def _read_rules(project_id: int) -> CompiledRules:
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


@dataclass
class PreparedMessage:
    """A message draft with its calls redacted and counted: what remains is SQL."""

    draft: MessageDraft
    calls: list[PreparedCall]


def prepare_messages(ctx: WriteContext, drafts: Sequence[MessageDraft]) -> list[PreparedMessage]:
    """The CPU work of a message batch, done before the write lock: checks and redaction (the
    tokens of the content and the calls are counted later, by the token pass).

    Pure (no database). Raises `Invalid` for a bad item.
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
            now=ctx.now,
            max_result_bytes=ctx.max_result_bytes,
        )
        prepared.append(PreparedMessage(draft, calls))
    _mask_texts(ctx.rules, drafts)
    return prepared


def _mask_texts(rules: CompiledRules, drafts: Sequence[MessageDraft]) -> None:
    """The mask rules that name no tool, on what the messages say besides their calls: their
    content and their rounds' text and reasoning (one pass of each rule over all of it)."""
    if not rules.content_policy.masks:
        return
    places: list[tuple[Any, str]] = [(d, "content") for d in drafts if d.content]
    places += [
        (u, name)
        for d in drafts
        for u in d.usage
        for name in ("content", "reasoning")
        if getattr(u, name)
    ]
    masked, names = rules.content_policy.mask([getattr(o, name) for o, name in places])
    if names:
        for (target, name), value in zip(places, masked, strict=True):
            setattr(target, name, value)


def store_messages(
    ctx: WriteContext,
    conversation_id: int,
    conversation_label: str,
    prepared: Sequence[PreparedMessage],
) -> list[dict[str, Any]]:
    """Prepared messages with their calls and usage into one conversation; the stored rows.

    Statements: messages 1-3, calls 1-3 (no SELECT when every message is new), usage 0-3, and
    the conversation's UPDATE last.
    """
    drafts = [p.draft for p in prepared]
    stored, made = upsert_messages(
        ctx.project_id, conversation_id, conversation_label, drafts, ctx.now
    )
    store_calls(
        ctx.project_id,
        [
            CallBatch(
                stored[p.draft.external_id]["id"],
                p.draft.external_id,
                p.calls,
                new_message=p.draft.external_id in made,
            )
            for p in prepared
            if p.calls
        ],
    )
    store_usage(
        [(stored[d.external_id], u) for d in drafts for u in d.usage],
        ctx.price_overrides,
        ctx.now,
        project_id=ctx.project_id,
    )
    touch_conversations([conversation_id], ctx.now)
    return [stored[d.external_id] for d in drafts]


@dataclass
class PreparedToolBatch:
    """A MessageTool batch, redacted; its token counts are left to the token pass."""

    message_external_id: str
    calls: list[PreparedCall]


def prepare_message_tools(
    ctx: WriteContext, message_external_id: str, drafts: Sequence[CallDraft]
) -> PreparedToolBatch:
    """The CPU work of a MessageTool batch, before the write lock: redaction and measuring.
    The tokens are counted by the token pass, with the model the message has by then."""
    check_not_otlp_owned(message_external_id, "messageId")
    calls = prepare_calls(
        drafts,
        ctx.rules,
        now=ctx.now,
        max_result_bytes=ctx.max_result_bytes,
    )
    return PreparedToolBatch(message_external_id, calls)


def store_message_tools(ctx: WriteContext, batch: PreparedToolBatch) -> list[dict[str, Any]]:
    """A MessageTool batch: calls of one message, which may not be in a conversation yet."""
    message, made = message_for_tools(ctx.project_id, batch.message_external_id, ctx.now)
    rows = store_calls(
        ctx.project_id,
        [CallBatch(message["id"], batch.message_external_id, batch.calls, new_message=made)],
    )
    if message["conversation_id"] is not None:
        touch_conversations([message["conversation_id"]], ctx.now)
    return rows[message["id"]]
