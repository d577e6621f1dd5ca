"""Naive replay: the stored rows sent as they are, to show what the replay rules prevent.

The naive payload applies none of the rules except ``as_of`` (rows created later do not exist;
a response created later is missing): every stored call in ``(round, sequence)`` order per
message, calls without a response sent without a result, ids as stored (empty or duplicated),
unfinished runs included, no freshness window, no trimming, compaction, truncation, budget or
role merging. ``naive_replay_problems`` validates it so a page can list what would break.
"""

from __future__ import annotations

from datetime import datetime
from itertools import groupby
from typing import Any

from .build import call_order, latest_moment, round_of, sorted_messages
from .diagnostics import Problem
from .formats import render
from .history import History, ToolCall
from .jsonfast import dumps
from .options import ReplayOptions
from .units import CallOut, Unit
from .validate import Memo, validate


def _arguments_json(c: ToolCall) -> str:
    if c.arguments_json is not None:
        return c.arguments_json
    return dumps(c.arguments) if c.arguments is not None else "{}"


def _response_at(c: ToolCall, as_of: datetime | None) -> str | None:
    """The stored response, unless it was created after ``as_of``."""
    rc = c.response_created_at
    if as_of is not None and rc is not None and rc > as_of:
        return None
    return c.response


def naive_payload(history: History, options: ReplayOptions) -> dict[str, Any]:
    """The payload a replay of the raw stored rows would send, in ``options.format``."""
    messages = sorted_messages(history)
    as_of = options.as_of or latest_moment(messages)
    units: list[Unit] = []
    for pos, m in enumerate(messages):
        if as_of is not None and m.created_at > as_of:
            continue
        if m.role != "assistant":
            kind = "user" if m.role == "user" else "system"
            units.append(
                Unit(kind=kind, pos=pos, message_id=m.external_id, turn=0, text=m.content or "")
            )
            continue
        calls = m.tool_calls
        if as_of is not None:
            calls = [c for c in calls if c.created_at <= as_of]
        for round_index, group in groupby(sorted(calls, key=call_order), key=round_of):
            # Positional, in CallOut's field order: this runs once per stored call.
            outs = [
                CallOut(
                    c.row_id,
                    c.external_id,
                    c.function_name,
                    c.arguments,
                    _arguments_json(c),
                    _response_at(c, as_of),
                    c.is_error,
                    c.sequence_index,
                )
                for c in group
            ]
            units.append(
                Unit(
                    kind="round",
                    pos=pos,
                    message_id=m.external_id,
                    turn=0,
                    round_index=round_index,
                    calls=outs,
                )
            )
        if m.content:
            units.append(
                Unit(kind="text", pos=pos, message_id=m.external_id, turn=0, text=m.content)
            )
    system = history.system_prompt or None
    return render(units, system, list(history.tool_definitions), options.format, merge=False)


def naive_replay_problems(
    history: History, options: ReplayOptions, memo: Memo | None = None
) -> list[Problem]:
    """What a provider would reject if the raw stored rows were replayed as they are. With the
    ``memo`` of the replay's own validation, the arguments and names it checked are not
    checked again (the naive payload sends the same ones)."""
    return validate(naive_payload(history, options), options.format, memo)
