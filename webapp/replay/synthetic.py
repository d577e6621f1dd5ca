"""Deterministic synthetic histories for benchmarks and tests (pure: no I/O, no clock).

``make_synthetic_history(turns, calls_per_turn, seed)`` builds a conversation of ``turns`` user
messages, each answered by one assistant run with ``calls_per_turn`` calls spread over rounds
of up to three parallel calls. The mix exercises every rule: some calls lack a response, some
have empty or repeated ids, some runs failed, search tools return ``source_number`` lists cited
in the answer, a few results are large. Turns are 20 seconds apart, so with the default
5-minute window only the last ~15 turns are fresh.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

from .history import History, Message, ServiceCall, ToolCall, ToolDefinition

_BASE = datetime(2025, 1, 1, tzinfo=UTC)
_TOOLS = ("internal_search", "vendor_lookup", "get_weather", "sql_query")


def _definitions() -> tuple[ToolDefinition, ...]:
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }
    return tuple(ToolDefinition(name, f"The {name} tool.", schema) for name in _TOOLS)


def make_synthetic_history(turns: int, calls_per_turn: int, seed: int = 0) -> History:
    rng = random.Random(seed)
    messages: list[Message] = []
    row = 0
    source = 0
    t = _BASE
    for turn in range(turns):
        row += 1
        messages.append(
            Message(row, f"u{turn}", "user", f"Question number {turn}: what about item {turn}?", t)
        )
        t += timedelta(seconds=1)
        calls: list[ToolCall] = []
        cited: list[int] = []
        assistant_row = row + 1
        row += 1
        for k in range(calls_per_turn):
            round_index, seq = divmod(k, 3)
            row += 1
            name = _TOOLS[k % len(_TOOLS)]
            at = t + timedelta(milliseconds=50 * k)
            roll = rng.random()
            response: str | None
            if name == "internal_search":
                items = []
                for _ in range(3):
                    items.append(
                        {
                            "source_number": source,
                            "title": f"Doc {source}",
                            "text": "Lorem ipsum dolor sit amet. " * 4,
                        }
                    )
                    if rng.random() < 0.5:
                        cited.append(source)
                    source += 1
                response = json.dumps(items)
            elif roll < 0.05:
                response = "x" * 20000
            else:
                response = json.dumps({"result": f"value {turn}.{k}", "ok": True})
            if roll > 0.95:
                response = None
            elif roll > 0.93:
                response = ""
            ext = f"call_{turn}_{k}"
            if roll < 0.02:
                ext = ""
            elif 0.02 <= roll < 0.03:
                ext = "call_dup"
            calls.append(
                ToolCall(
                    row_id=row,
                    external_id=ext,
                    function_name=name,
                    arguments={"query": f"q{turn}-{k}", "limit": k},
                    round_index=round_index,
                    sequence_index=seq,
                    created_at=at,
                    response=response,
                    response_created_at=None
                    if response is None
                    else at + timedelta(milliseconds=20),
                    is_error=rng.random() < 0.03,
                )
            )
        rounds = (calls_per_turn + 2) // 3
        status = "failed" if rng.random() < 0.05 else "completed"
        text = "Here is the answer. " + " ".join(f"[source{n}]" for n in cited)
        services = tuple(ServiceCall(r, "gpt-x", 1000, 100, 0, t) for r in range(rounds + 1))
        messages.append(
            Message(
                assistant_row,
                f"a{turn}",
                "assistant",
                text,
                t,
                status,
                "gpt-x",
                tuple(calls),
                services,
            )
        )
        t += timedelta(seconds=19)
    return History(
        conversation_id=f"synthetic-{seed}",
        channel="bench",
        system_prompt="You are a helpful agent.",
        tool_definitions=_definitions(),
        messages=tuple(messages),
    )
