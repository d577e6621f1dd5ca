"""A small hand-made project for the analytics tests, written straight into the database.

Token counts are stored as given (as ingestion would have stored them), so every number the
charts show can be computed by hand in the tests. ``HAND`` below is that computation.

Conversation ``c1`` (project default freshness window: 300 s), model gpt-4o:

====  =========  ==================================================================
t+s   message    content
====  =========  ==================================================================
0     u1 user    5 tokens
1     a1 asst.   round 0: search (args 7, result 100), fetch (args 4, result 300)
                 round 1: search (args 6, result 50); final text (8 tokens) -> 3 calls
60    u2 user    4 tokens
61    a2 asst.   round 0: fetch (args 5, result 1000); final text (2 tokens) -> 2 calls
400   u3 user    3 tokens
401   a3 asst.   text only (1 token) -> 1 call
====  =========  ==================================================================

At a2's start a1's results are ~58 s old (kept); at a3's start every result is older than
300 s (stale), so a1's results reach one later run and a2's none.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from webapp.analytics.context import StoredCounts
from webapp.db import db
from webapp.ingest.rollups import rebuild
from webapp.models import (
    Channel,
    Conversation,
    Message,
    Project,
    ServiceCall,
    ToolDefinition,
    ToolInvocation,
)
from webapp.replay.history import History, ToolCall
from webapp.replay.history import Message as HistoryMessage
from webapp.replay.history import ServiceCall as HistoryServiceCall
from webapp.replay.history import ToolDefinition as HistoryToolDefinition

T0 = datetime(2025, 3, 10, 9, 0, tzinfo=UTC)
DAY2 = datetime(2025, 3, 12, 15, 30, tzinfo=UTC)
SYSTEM_PROMPT = "You are a helpful assistant."
# gpt-4o priced by a project override, so costs are exact round numbers: $2 / $8 per 1M.
OVERRIDES = {"gpt-4o": {"input_per_mtok": "2", "output_per_mtok": "8"}}
INPUT_USD_PER_TOKEN = Decimal("0.000002")
PARAMS = {"type": "object", "properties": {"q": {"type": "string"}}}


@dataclass
class Seeded:
    project_id: int
    c1: int  # conversation row ids
    c2: int
    other_project_conversation: int


def _at(seconds: float, base: datetime = T0) -> datetime:
    return base + timedelta(seconds=seconds)


def _message(conv: Conversation, ext: str, role: str, at: float, tokens: int, **kw) -> Message:
    m = Message(
        project_id=conv.project_id,
        conversation_id=conv.id,
        external_id=ext,
        role=role,
        content=kw.pop("content", f"{role} text {ext}"),
        created_at=_at(at, kw.pop("base", T0)),
        content_tokens=tokens,
        status="completed" if role == "assistant" else None,
        model="gpt-4o" if role == "assistant" else None,
        **kw,
    )
    db.session.add(m)
    db.session.flush()
    return m


def _call(
    m: Message,
    round_index: int,
    seq: int,
    name: str,
    args_tokens: int,
    result_tokens: int | None,
    at: float,
    *,
    base: datetime = T0,
    is_error: bool = False,
    response: str | None = None,
) -> ToolInvocation:
    call = ToolInvocation(
        project_id=m.project_id,
        message_id=m.id,
        round_index=round_index,
        sequence_index=seq,
        external_tool_call_id=f"call_{m.external_id}_{round_index}_{seq}",
        function_name=name,
        arguments={"q": "x"},
        created_at=_at(at, base),
        response=(response if response is not None else "r" * (result_tokens or 0))
        if result_tokens is not None
        else None,
        response_created_at=_at(at + 0.5, base) if result_tokens is not None else None,
        is_error=is_error,
        arguments_tokens=args_tokens,
        response_tokens=result_tokens,
        token_method="tiktoken:o200k_base",
        response_bytes=result_tokens,
    )
    db.session.add(call)
    return call


def _usage(
    m: Message,
    round_index: int,
    input_tokens: int,
    output_tokens: int,
    cost: str | None,
    at: float,
    *,
    base: datetime = T0,
    model: str = "gpt-4o",
) -> None:
    db.session.add(
        ServiceCall(
            message_id=m.id,
            round_index=round_index,
            model=model,
            provider="openai",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=0,
            created_at=_at(at, base),
            cost_usd=None if cost is None else Decimal(cost),
            price_source=None if cost is None else "override",
            price_version=None if cost is None else "project-override",
        )
    )


def _conversation(project: Project, ext: str, created: datetime, **kw) -> Conversation:
    conv = Conversation(
        project_id=project.id,
        external_id=ext,
        title=kw.pop("title", ext),
        created_at=created,
        updated_at=created + timedelta(minutes=10),
        **kw,
    )
    db.session.add(conv)
    db.session.flush()
    return conv


def seed(project_id: int) -> Seeded:
    """The hand-made data; call inside an app context. Commits."""
    project = db.session.get(Project, project_id)
    assert project is not None
    project.price_overrides = OVERRIDES
    project.freshness_seconds = 300

    c1 = _conversation(project, "c1", T0, system_prompt=SYSTEM_PROMPT)
    db.session.add(
        ToolDefinition(
            conversation_id=c1.id,
            name="search",
            description="Search the docs.",
            parameters=PARAMS,
        )
    )
    _message(c1, "u1", "user", 0, 5)
    a1 = _message(c1, "a1", "assistant", 1, 8, content="Revenue was up.")
    _call(a1, 0, 0, "search", 7, 100, 2)
    _call(a1, 0, 1, "fetch", 4, 300, 2.2)
    _call(a1, 1, 0, "search", 6, 50, 4)
    _usage(a1, 0, 120, 20, "0.0004", 1.5)
    _usage(a1, 1, 560, 15, "0.00124", 3.5)
    _usage(a1, 2, 640, 30, "0.00152", 5)
    _message(c1, "u2", "user", 60, 4)
    a2 = _message(c1, "a2", "assistant", 61, 2, content="Done.")
    _call(a2, 0, 0, "fetch", 5, 1000, 62)
    _usage(a2, 0, 700, 10, "0.00148", 61.5)
    _usage(a2, 1, 1710, 5, "0.00346", 63)
    _message(c1, "u3", "user", 400, 3)
    a3 = _message(c1, "a3", "assistant", 401, 1, content="Bye")
    _usage(a3, 0, 90, 2, "0.000196", 401.5)

    # c2, two days later, in channel "beta": an error, a call without a response, an unpriced
    # service call of a model no price source knows.
    beta = Channel(project_id=project.id, name="beta")
    db.session.add(beta)
    db.session.flush()
    c2 = _conversation(project, "c2", DAY2, channel_id=beta.id)
    _message(c2, "v1", "user", 0, 6, base=DAY2)
    b1 = _message(c2, "b1", "assistant", 1, 3, base=DAY2, content="Sorry.")
    _call(b1, 0, 0, "search", 5, 40, 2, base=DAY2, is_error=True)
    _call(b1, 0, 1, "fetch", 5, None, 2, base=DAY2)
    _usage(b1, 0, 200, 10, None, 1.5, base=DAY2, model="my-own-llm")

    # Another project's data must never show up.
    other = Project(slug="elsewhere", name="elsewhere", price_overrides={})
    db.session.add(other)
    db.session.flush()
    c3 = _conversation(other, "x1", T0)
    _message(c3, "w1", "user", 0, 5)
    x1 = _message(c3, "x1a", "assistant", 1, 1, content="Hi")
    _call(x1, 0, 0, "secret_tool", 1, 9999, 2)
    _usage(x1, 0, 99999, 1, "9.99", 1.5)
    rebuild()  # rows written past the write paths: the roll-ups from them
    db.session.commit()
    return Seeded(project.id, c1.id, c2.id, c3.id)


# --- the same conversation as a plain History (for the pure tests) ----------------------------


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def call(row: int, rnd: int, seq: int, name: str, response: str | None, t: float) -> ToolCall:
    return ToolCall(
        row_id=row,
        external_id=f"call_{row}",
        function_name=name,
        arguments={"q": "x"},
        round_index=rnd,
        sequence_index=seq,
        created_at=at(t),
        response=response,
        response_created_at=None if response is None else at(t + 0.5),
    )


def usage(rnd: int, input_tokens: int, t: float) -> HistoryServiceCall:
    return HistoryServiceCall(rnd, "gpt-4o", input_tokens, 10, 0, at(t))


def hand_history() -> tuple[History, StoredCounts]:
    """Rows 1-6 are messages, 11-14 tool calls; token counts as stored at ingestion."""
    messages = (
        HistoryMessage(1, "u1", "user", "Find the revenue", at(0)),
        HistoryMessage(
            2,
            "a1",
            "assistant",
            "Revenue was up.",
            at(1),
            "completed",
            "gpt-4o",
            (
                call(11, 0, 0, "search", "r" * 100, 2),
                call(12, 0, 1, "fetch", "r" * 300, 2.2),
                call(13, 1, 0, "search", "r" * 50, 4),
            ),
            (usage(0, 120, 1.5), usage(1, 560, 3.5), usage(2, 640, 5)),
        ),
        HistoryMessage(3, "u2", "user", "And costs?", at(60)),
        HistoryMessage(
            4,
            "a2",
            "assistant",
            "Done.",
            at(61),
            "completed",
            "gpt-4o",
            (call(14, 0, 0, "fetch", "r" * 1000, 62),),
            (usage(0, 700, 61.5), usage(1, 1710, 63)),
        ),
        HistoryMessage(5, "u3", "user", "Thanks", at(400)),
        HistoryMessage(
            6, "a3", "assistant", "Bye", at(401), "completed", "gpt-4o", (), (usage(0, 90, 401.5),)
        ),
    )
    history = History(
        conversation_id="c1",
        channel=None,
        system_prompt="You are a helpful assistant.",
        tool_definitions=(HistoryToolDefinition("search", "Search the docs.", PARAMS),),
        messages=messages,
    )
    counts = StoredCounts(
        arguments={11: 7, 12: 4, 13: 6, 14: 5},
        results={11: 100, 12: 300, 13: 50, 14: 1000},
        messages={1: 5, 2: 8, 3: 4, 4: 2, 5: 3, 6: 1},
    )
    return history, counts
