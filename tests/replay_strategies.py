"""Builders and hypothesis strategies shared by the replay tests (tests/test_replay_*.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from webapp.replay import (
    FORMATS,
    History,
    Message,
    ReplayOptions,
    ServiceCall,
    ToolCall,
    ToolDefinition,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
LONG_ID = "call_" + "a" * 40
LONG_TOOLU = "toolu_" + "B" * 50
_UNSET: Any = object()


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def call(
    row_id: int,
    ext: str,
    *,
    name: str = "search",
    args: dict[str, Any] | None = _UNSET,
    round: int = 0,
    seq: int = 0,
    t: float = 0,
    response: str | None = "ok",
    rt: float | None = _UNSET,
    is_error: bool = False,
    redacted: bool = False,
) -> ToolCall:
    """A tool call at ``t`` seconds; its response (if any) lands one second later by default."""
    if rt is _UNSET:
        rt = None if response is None else t + 1
    return ToolCall(
        row_id=row_id,
        external_id=ext,
        function_name=name,
        arguments={"q": ext} if args is _UNSET else args,
        round_index=round,
        sequence_index=seq,
        created_at=at(t),
        response=response,
        response_created_at=None if rt is None else at(rt),
        is_error=is_error,
        redacted=redacted,
    )


def user(row_id: int, text: str | None, t: float) -> Message:
    return Message(row_id, f"u{row_id}", "user", text, at(t))


def system_msg(row_id: int, text: str, t: float) -> Message:
    return Message(row_id, f"s{row_id}", "system", text, at(t))


def assistant(
    row_id: int,
    content: str | None,
    t: float,
    calls: tuple[ToolCall, ...] = (),
    *,
    status: str | None = "completed",
    services: tuple[ServiceCall, ...] = (),
    imported: bool = False,
) -> Message:
    return Message(
        row_id, f"a{row_id}", "assistant", content, at(t), status, "m", calls, services, imported
    )


def history(
    *messages: Message,
    system: str | None = None,
    tools: tuple[ToolDefinition, ...] = (),
    conversation_id: str = "conv-1",
    channel: str | None = None,
) -> History:
    return History(conversation_id, channel, system, tools, tuple(messages))


def sources(*numbers: int) -> str:
    return json.dumps([{"source_number": n, "title": f"Doc {n}"} for n in numbers])


SEARCH_TOOL = ToolDefinition(
    "search",
    "Search the docs.",
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)


# -- hypothesis -------------------------------------------------------------------------------

# Ids: empty, shared between calls, provider-invalid for Anthropic, over 64 characters, over
# Chat Completions' 40 (45 and 56 characters, the second one valid for Anthropic).
_IDS = st.sampled_from(
    ["", "", "dup", "call_1", "call_2", "tc.01", "x" * 70, "toolu_A-9", LONG_ID, LONG_TOOLU]
)
# Names providers refuse (a space, a dot, over 64 characters), two of which sanitize to the
# same name, which a valid name already has.
REFUSED_NAMES = ("get weather", "search.v2", "search v2", "n" * 70)
_NAMES = st.sampled_from(["search", "lookup", "sql_query", "search_v2", *REFUSED_NAMES])
# A result already cut by an agent's ``ToolResultTruncator`` (or by an export imported back).
CUT_RESULT = "E" * 20 + "\n[... truncated 745 tokens ...]"
_RESPONSES = st.one_of(
    st.none(),
    st.just(""),
    st.text(max_size=30),
    st.just("E" * 3000),  # huge
    st.just(CUT_RESULT),
    st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True).map(lambda ns: sources(*ns)),
)
_TEXTS = st.one_of(
    st.none(),
    st.just(""),
    st.just("   "),
    st.text(max_size=20),
    st.lists(st.integers(0, 9), max_size=3).map(
        lambda ns: "Answer " + " ".join(f"[Source{n}]" if n % 2 else f"[source{n}]" for n in ns)
    ),
)
_STATUS = st.sampled_from(["completed", "completed", "failed", "cancelled", "in_progress", None])


@st.composite
def histories(draw: st.DrawFn) -> History:
    """Conversations with every kind of trouble the replay has to handle."""
    clock = 0.0
    row = 0
    messages: list[Message] = []
    for _ in range(draw(st.integers(0, 5))):
        clock += draw(st.sampled_from([1.0, 30.0, 200.0, 400.0]))
        row += 1
        kind = draw(st.sampled_from(["user", "user", "assistant", "assistant", "system"]))
        if kind == "user":
            messages.append(user(row, draw(st.sampled_from(["hi", "next?", "", None])), clock))
            continue
        if kind == "system":
            messages.append(system_msg(row, "Be brief.", clock))
            continue
        msg_row = row
        calls = []
        n_rounds = draw(st.integers(0, 3))
        for r in range(n_rounds):
            for s in range(draw(st.integers(1, 3))):
                row += 1
                t = clock + r * 2 + s * 0.1
                response = draw(_RESPONSES)
                rt = None if response is None else t + draw(st.sampled_from([0.5, 100.0, 500.0]))
                calls.append(
                    call(
                        row,
                        draw(_IDS),
                        name=draw(_NAMES),
                        args=draw(st.sampled_from([None, {}, {"q": "x"}, {"q": "é", "n": [1]}])),
                        round=r,
                        seq=s,
                        t=t,
                        response=response,
                        rt=rt,
                        is_error=draw(st.booleans()),
                        redacted=draw(st.booleans()),
                    )
                )
        services = tuple(
            ServiceCall(r, "m", 10, 5, 0, at(clock + r * 2 + 1))
            for r in range(n_rounds + draw(st.integers(0, 1)))
            if draw(st.booleans())
        )
        messages.append(
            assistant(
                msg_row,
                draw(_TEXTS),
                clock,
                tuple(draw(st.permutations(calls))),
                status=draw(_STATUS),
                services=services,
                imported=draw(st.sampled_from([False, False, False, True])),
            )
        )
        clock += n_rounds * 2 + 1
    if draw(st.booleans()):
        clock += 1
        row += 1
        messages.append(user(row, "latest question", clock))
    tools = draw(
        st.lists(
            st.sampled_from(
                [
                    SEARCH_TOOL,
                    ToolDefinition("lookup", None, None),
                    ToolDefinition("sql_query", "Run SQL.", {"type": "object", "properties": {}}),
                    ToolDefinition("get weather", "Weather.", {"properties": {}}),
                    ToolDefinition("search.v2", None, None),
                    ToolDefinition("search_v2", "Search, v2.", None),
                ]
            ),
            max_size=3,
        )
    )
    return History(
        conversation_id=draw(st.sampled_from(["conv-1", "conv-2"])),
        channel=draw(st.sampled_from([None, "support-bot", "live-dashboard"])),
        system_prompt=draw(st.sampled_from([None, "", "You are helpful."])),
        tool_definitions=tuple(tools),
        messages=tuple(draw(st.permutations(messages))),
    )


@st.composite
def options(draw: st.DrawFn, fmt: str | None = None) -> ReplayOptions:
    return ReplayOptions(
        as_of=draw(st.one_of(st.none(), st.floats(0, 3000).map(at))),
        format=fmt or draw(st.sampled_from(FORMATS)),
        freshness_seconds=draw(st.sampled_from([None, 0.0, 60.0, 300.0, 3600.0])),
        persistence=draw(st.sampled_from(["per-run", "per-service-call"])),
        trim_trailing=draw(st.booleans()),
        compact_sources=draw(st.booleans()),
        result_token_cap=draw(st.sampled_from([None, 0, 5, 100])),
        context_budget=draw(st.sampled_from([None, 0, 20, 60, 200, 2000])),
        prune=draw(st.sampled_from(["fifo", "turns"])),
    )


# -- the history as it stood at a moment ---------------------------------------------------------


def event_times(h: History) -> list[datetime]:
    """Every moment something was stored: messages, calls, responses, service calls."""
    times = set()
    for m in h.messages:
        times.add(m.created_at)
        for c in m.tool_calls:
            times.add(c.created_at)
            if c.response_created_at is not None:
                times.add(c.response_created_at)
        times.update(s.created_at for s in m.service_calls if s.created_at is not None)
    return sorted(times)


def as_it_stood(h: History, as_of: datetime) -> History:
    """What was stored at ``as_of``: later rows removed, later responses not there yet, and a
    run with anything later still in progress, without its final text."""
    messages = []
    for m in h.messages:
        if m.created_at > as_of:
            continue
        calls = []
        late = False
        for c in m.tool_calls:
            if c.created_at > as_of:
                late = True
                continue
            rc = c.response_created_at
            if rc is not None and rc > as_of:
                late = True
                c = replace(c, response=None, response_created_at=None)
            calls.append(c)
        services = tuple(
            s for s in m.service_calls if s.created_at is None or s.created_at <= as_of
        )
        late = late or len(services) < len(m.service_calls)
        if late:
            m = replace(m, status="in_progress", content=None)
        messages.append(replace(m, tool_calls=tuple(calls), service_calls=services))
    return replace(h, messages=tuple(messages))
