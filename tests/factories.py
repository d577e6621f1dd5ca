"""Realistic conversations inserted straight through the models, for the dashboard's tests.

Call these inside an app context; they flush but leave the commit to the caller (``commit()``
below), so a test can build several things in one transaction. Timestamps default to "now" so
that freshness badges behave predictably: pass ``at=`` to place a conversation in the past.

* :func:`support_conversation` — three turns of a support agent: parallel calls with timings,
  a sources list cited in the answer, an error, a missing response, a redacted call, a failed
  run and a run still in progress.
* :func:`big_conversation` — any number of calls (10,000 in the page-weight test) built with
  bulk inserts, a few statements whatever the size.
* :func:`simple_conversation` — one turn with a few calls, for counting queries over many
  conversations.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import insert, select

from webapp.db import db
from webapp.ingest.rollups import rebuild
from webapp.models import (
    Channel,
    Conversation,
    Message,
    ServiceCall,
    ToolDefinition,
    ToolInvocation,
)


def commit() -> None:
    """Commit, with the roll-ups recomputed from the rows these factories wrote past the
    write paths (webapp.ingest.rollups)."""
    rebuild()
    db.session.commit()


def tokens(text: str | None) -> int | None:
    return None if text is None else math.ceil(len(text) / 4)


def channel(project_id: int, name: str, freshness_seconds: int | None = None) -> Channel:
    found = db.session.scalar(
        select(Channel).where(Channel.project_id == project_id, Channel.name == name)
    )
    if found is None:
        found = Channel(project_id=project_id, name=name, freshness_seconds=freshness_seconds)
        db.session.add(found)
        db.session.flush()
    return found


def conversation(
    project_id: int,
    external_id: str,
    *,
    title: str = "",
    channel_name: str | None = None,
    at: datetime | None = None,
    meta: dict[str, Any] | None = None,
    system_prompt: str | None = None,
) -> Conversation:
    at = at or datetime.now(UTC)
    conv = Conversation(
        project_id=project_id,
        external_id=external_id,
        title=title,
        channel_id=channel(project_id, channel_name).id if channel_name else None,
        meta=meta or {},
        system_prompt=system_prompt,
        created_at=at,
        updated_at=at,
    )
    db.session.add(conv)
    db.session.flush()
    return conv


def message(
    conv: Conversation,
    external_id: str,
    role: str,
    content: str | None,
    *,
    at: datetime,
    status: str | None = None,
    model: str | None = None,
) -> Message:
    msg = Message(
        project_id=conv.project_id,
        external_id=external_id,
        conversation_id=conv.id,
        role=role,
        content=content,
        created_at=at,
        status=status if role == "assistant" else None,
        model=model,
        content_tokens=tokens(content),
    )
    db.session.add(msg)
    db.session.flush()
    if at > conv.updated_at:
        conv.updated_at = at
    return msg


@dataclass
class Call:
    """One tool call to add to a message (``response=None``: no response yet)."""

    name: str
    arguments: dict[str, Any] | None
    response: str | None = None
    is_error: bool = False
    started_ms: float | None = None  # offset from the message time
    duration_ms: float | None = None
    redactions: list[str] | None = None
    external_id: str | None = None


def calls(
    msg: Message, round_index: int, round_calls: list[Call], *, at: datetime
) -> list[ToolInvocation]:
    rows = []
    for seq, spec in enumerate(round_calls):
        started = (
            at + timedelta(milliseconds=spec.started_ms) if spec.started_ms is not None else None
        )
        ended = (
            started + timedelta(milliseconds=spec.duration_ms)
            if started is not None and spec.duration_ms is not None
            else None
        )
        args_text = json.dumps(spec.arguments) if spec.arguments is not None else None
        row = ToolInvocation(
            project_id=msg.project_id,
            message_id=msg.id,
            round_index=round_index,
            sequence_index=seq,
            external_tool_call_id=spec.external_id
            if spec.external_id is not None
            else f"call_{msg.id}_{round_index}_{seq}",
            function_name=spec.name,
            arguments=spec.arguments,
            created_at=at,
            started_at=started,
            ended_at=ended,
            response=spec.response,
            response_created_at=(ended or at) if spec.response is not None else None,
            is_error=spec.is_error,
            redactions=spec.redactions,
            arguments_tokens=tokens(args_text),
            response_tokens=tokens(spec.response),
            token_method="heuristic:chars/4",
            response_bytes=len(spec.response.encode()) if spec.response is not None else None,
        )
        db.session.add(row)
        rows.append(row)
    db.session.flush()
    return rows


def usage(
    msg: Message,
    round_index: int,
    *,
    model: str = "gpt-4o",
    input_tokens: int = 1200,
    output_tokens: int = 80,
    cost: str = "0.0038",
) -> ServiceCall:
    sc = ServiceCall(
        message_id=msg.id,
        round_index=round_index,
        model=model,
        provider="openai",
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=0,
        created_at=msg.created_at,
        cost_usd=Decimal(cost),
        price_source="test",
    )
    db.session.add(sc)
    db.session.flush()
    return sc


SOURCES = json.dumps(
    [
        {"source_number": 1, "title": "Refund policy", "text": "Refunds within 30 days."},
        {"source_number": 2, "title": "Shipping", "text": "Ships in 2 days."},
        {"source_number": 3, "title": "Warranty", "text": "Two years."},
    ]
)


def support_conversation(
    project_id: int,
    external_id: str = "conv-support-1",
    *,
    title: str = "Refund for order #1042",
    channel_name: str | None = "support-bot",
    at: datetime | None = None,
) -> Conversation:
    """Three turns: parallel calls with timings and a cited sources list; a failed run with
    an error and a call without response; a run still in progress."""
    start = at or datetime.now(UTC) - timedelta(minutes=2)
    conv = conversation(
        project_id,
        external_id,
        title=title,
        channel_name=channel_name,
        at=start,
        meta={"customer": "ACME", "tier": "gold"},
        system_prompt="You are a helpful support agent for ACME. Cite sources as [sourceN].",
    )
    for name in ("search_kb", "get_order", "create_ticket"):
        db.session.add(ToolDefinition(conversation_id=conv.id, name=name, parameters={}))

    t = start
    message(conv, f"{external_id}-u1", "user", "I want a refund for order #1042.", at=t)
    t += timedelta(seconds=1)
    a1 = message(
        conv,
        f"{external_id}-a1",
        "assistant",
        "You can get a refund within 30 days [source1]. I opened ticket T-77 for you.",
        at=t,
        status="completed",
        model="gpt-4o",
    )
    calls(
        a1,
        0,
        [
            Call(
                "search_kb",
                {"query": "refund policy", "top_k": 3},
                SOURCES,
                started_ms=5,
                duration_ms=420,
            ),
            Call(
                "get_order",
                {"order_id": "1042"},
                json.dumps({"order_id": "1042", "status": "delivered", "total": 99.5}),
                started_ms=8,
                duration_ms=180,
            ),
            Call(
                "get_customer",
                {"email": "[REDACTED:email]"},
                json.dumps({"name": "Jane", "tier": "gold"}),
                started_ms=9,
                duration_ms=95,
                redactions=["mask-pii"],
            ),
        ],
        at=t,
    )
    calls(
        a1,
        1,
        [
            Call(
                "create_ticket",
                {"order_id": "1042", "reason": "refund"},
                json.dumps({"ticket": "T-77"}),
                started_ms=600,
                duration_ms=250,
            ),
        ],
        at=t,
    )
    usage(a1, 0, input_tokens=1850, output_tokens=96, cost="0.0056")
    usage(a1, 1, input_tokens=2410, output_tokens=64, cost="0.0067")
    usage(a1, 2, input_tokens=2600, output_tokens=41, cost="0.0069")

    t += timedelta(seconds=20)
    message(conv, f"{external_id}-u2", "user", "Also check my other order #1043 please.", at=t)
    t += timedelta(seconds=1)
    a2 = message(
        conv, f"{external_id}-a2", "assistant", None, at=t, status="failed", model="gpt-4o"
    )
    calls(
        a2,
        0,
        [
            Call(
                "get_order",
                {"order_id": "1043"},
                "upstream timeout after 30s",
                is_error=True,
                started_ms=3,
                duration_ms=30000,
            ),
            Call("search_kb", {"query": "order 1043 status"}, None, started_ms=4),
        ],
        at=t,
    )
    usage(a2, 0, input_tokens=2900, output_tokens=52, cost="0.0077")

    t += timedelta(seconds=40)
    message(conv, f"{external_id}-u3", "user", "Any news?", at=t)
    t += timedelta(seconds=1)
    a3 = message(
        conv, f"{external_id}-a3", "assistant", None, at=t, status="in_progress", model="gpt-4o"
    )
    calls(a3, 0, [Call("get_order", {"order_id": "1043"}, None, started_ms=2)], at=t)
    db.session.flush()
    return conv


def simple_conversation(
    project_id: int, external_id: str, *, at: datetime | None = None, n_calls: int = 3
) -> Conversation:
    at = at or datetime.now(UTC)
    conv = conversation(project_id, external_id, title=f"Conversation {external_id}", at=at)
    message(conv, f"{external_id}-u", "user", "Hello", at=at)
    a = message(
        conv,
        f"{external_id}-a",
        "assistant",
        "Done.",
        at=at + timedelta(seconds=1),
        status="completed",
        model="gpt-4o-mini",
    )
    calls(
        a,
        0,
        [
            Call("lookup", {"i": i}, f"result {i}", started_ms=i, duration_ms=10 + i)
            for i in range(n_calls)
        ],
        at=at,
    )
    usage(a, 0)
    return conv


def assistant_ids(conv: Conversation) -> list[int]:
    """Row ids of the conversation's assistant messages, in timeline order."""
    return list(
        db.session.scalars(
            select(Message.id)
            .where(Message.conversation_id == conv.id, Message.role == "assistant")
            .order_by(Message.created_at, Message.id)
        )
    )


def big_conversation(
    project_id: int,
    external_id: str = "conv-big",
    *,
    turns: int = 200,
    rounds: int = 10,
    parallel: int = 5,
    at: datetime | None = None,
    response_chars: int = 400,
) -> Conversation:
    """``turns * rounds * parallel`` calls (10,000 by default) in a handful of bulk inserts."""
    at = at or datetime.now(UTC) - timedelta(hours=1)
    conv = conversation(project_id, external_id, title="Bulk research run", at=at)
    message_rows = []
    for turn in range(turns):
        t = at + timedelta(seconds=10 * turn)
        message_rows.append(
            dict(
                project_id=project_id,
                external_id=f"{external_id}-u{turn}",
                conversation_id=conv.id,
                role="user",
                content=f"Question {turn}",
                created_at=t,
                status=None,
                model=None,
            )
        )
        message_rows.append(
            dict(
                project_id=project_id,
                external_id=f"{external_id}-a{turn}",
                conversation_id=conv.id,
                role="assistant",
                content=f"Answer {turn} [source1]",
                created_at=t + timedelta(seconds=1),
                status="completed",
                model="gpt-4o",
            )
        )
    ids = db.session.scalars(
        insert(Message).returning(Message.id, sort_by_parameter_order=True), message_rows
    ).all()
    assistant_ids = ids[1::2]
    payload = "x" * response_chars
    call_rows = []
    for turn, message_id in enumerate(assistant_ids):
        t = at + timedelta(seconds=10 * turn + 1)
        for r in range(rounds):
            for s in range(parallel):
                started = t + timedelta(milliseconds=100 * r + s)
                call_rows.append(
                    dict(
                        project_id=project_id,
                        message_id=message_id,
                        round_index=r,
                        sequence_index=s,
                        external_tool_call_id=f"c{message_id}_{r}_{s}",
                        function_name=f"tool_{s}",
                        arguments={"q": f"t{turn} r{r} s{s}"},
                        created_at=t,
                        started_at=started,
                        ended_at=started + timedelta(milliseconds=50 + s * 7),
                        response=payload,
                        response_created_at=t,
                        is_error=(r + s) % 97 == 0,
                        redactions=None,
                        arguments_tokens=6,
                        response_tokens=response_chars // 4,
                        token_method="heuristic:chars/4",
                        response_bytes=response_chars,
                    )
                )
    db.session.execute(insert(ToolInvocation), call_rows)
    conv.updated_at = at + timedelta(seconds=10 * turns)
    db.session.flush()
    return conv
