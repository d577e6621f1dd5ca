"""Usage of LLM service calls (one row per round), with its cost fixed at ingestion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, select, update

from ..db import db
from ..pricing import PriceOverride, cost_for
from ..sql import SERVICE_CALL
from . import rollups
from .errors import Conflict, Duplicate
from .values import clean_text


@dataclass
class UsageDraft:
    field: str
    round_index: int
    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    content: str | None = None
    reasoning: str | None = None


_USAGE_FIELDS = (
    "model",
    "provider",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "created_at",
    "started_at",
    "ended_at",
    "content",
    "reasoning",
)


def store_usage(
    usage: Sequence[tuple[dict[str, Any], UsageDraft]],
    price_overrides: Mapping[str, Any] | None,
    now: datetime,
    *,
    project_id: int,
) -> None:
    """Store per-round usage of messages; `usage` pairs a stored message row with a draft
    (messages of a conversation of project `project_id`).

    A round's usage may be completed later (fields still empty are filled); a value that
    differs from a stored one is a conflict. Cost is computed here, once, with its price source.
    """
    if not usage:
        return
    message_ids = sorted({m["id"] for m, _ in usage})
    existing = {
        (r["message_id"], r["round_index"]): dict(r)
        for r in db.session.execute(
            select(SERVICE_CALL).where(SERVICE_CALL.c.message_id.in_(message_ids))
        ).mappings()
    }
    inserts, updates = [], []
    seen: dict[tuple[int, int], str] = {}
    for message, draft in usage:
        key = (message["id"], draft.round_index)
        if key in seen:
            raise Duplicate(
                draft.field,
                f"usage of round {draft.round_index} appears twice in this request",
                duplicate_of=seen[key],
            )
        seen[key] = draft.field
        stored = existing.get(key)
        given = {f: getattr(draft, f) for f in _USAGE_FIELDS if getattr(draft, f) is not None}
        for text_field in ("content", "reasoning"):
            if text_field in given:
                given[text_field] = clean_text(given[text_field])
        if stored is None:
            row = {
                "message_id": message["id"],
                "round_index": draft.round_index,
                **dict.fromkeys(_USAGE_FIELDS),
                **given,
            }
            row["model"] = row["model"] or message["model"]
            row["created_at"] = row["created_at"] or now
            price_usage(row, draft, price_overrides)
            inserts.append(row)
            existing[key] = row
            continue
        diffs = [f for f, v in given.items() if f != "created_at" and stored[f] not in (None, v)]
        if diffs:
            raise Conflict(
                f"{draft.field}: usage of round {draft.round_index} of message "
                f"{message['external_id']!r} is already stored with a different "
                f"{', '.join(diffs)}",
                [{"field": draft.field, "conflicting": diffs}],
            )
        missing = {f: v for f, v in given.items() if stored[f] is None}
        if missing:
            at = message["created_at"]
            rollups.add_usage(project_id, (dict(stored, message_created_at=at),), -1)
            stored.update(missing)
            price_usage(stored, draft, price_overrides)
            rollups.add_usage(project_id, (dict(stored, message_created_at=at),))
            updates.append(stored)
    if inserts:
        db.session.execute(SERVICE_CALL.insert(), inserts)
        rollups.add_usage(project_id, inserts)
    if updates:
        names = (*_USAGE_FIELDS, "cost_usd", "price_source", "price_version")
        db.session.execute(
            update(SERVICE_CALL)
            .where(SERVICE_CALL.c.id == bindparam("b_id"))
            .values({n: bindparam(f"b_{n}") for n in names}),
            [{"b_id": r["id"], **{f"b_{n}": r[n] for n in names}} for r in updates],
            execution_options={"synchronize_session": False},
        )


def price_usage(
    row: dict[str, Any], draft: UsageDraft, overrides: Mapping[str, Any] | None
) -> None:
    """Fix the cost of a service call at ingestion, with the price source that produced it."""
    row.update(cost_usd=None, price_source=None, price_version=None)
    if not row["model"] or row["input_tokens"] is None or row["output_tokens"] is None:
        return
    parsed = {}
    for name, value in (overrides or {}).items():
        try:
            parsed[name] = PriceOverride.from_dict(value)
        except (ValueError, TypeError, AttributeError):
            continue  # a broken override must not stop ingestion; the dashboard shows it
    try:
        cost = cost_for(
            row["model"],
            row["provider"],
            row["input_tokens"],
            row["output_tokens"],
            row["cached_tokens"] or 0,
            at=row["created_at"],
            overrides=parsed,
        )
    except ValueError:
        # Counts the price tables cannot read: more cached tokens than input tokens (a provider
        # that counts them apart, as Anthropic does). The counts are stored as sent, unpriced;
        # no document schema can compare two fields, so a client cannot be told to avoid it.
        return
    if cost is not None:
        row.update(
            cost_usd=Decimal(cost.total_usd),
            price_source=cost.source,
            price_version=cost.source_version,
        )
