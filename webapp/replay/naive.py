"""Naive replay: the stored rows sent as they are, to show what the replay rules prevent.

The naive payload applies none of the rules except ``as_of`` (rows created later do not exist;
a response created later is missing): every stored call in ``(round, sequence)`` order per
message, calls without a response sent without a result, ids as stored (empty or duplicated),
unfinished runs included, no freshness window, no trimming, compaction, truncation, budget or
role merging. ``naive_replay_problems`` validates it so a page can list what would break.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from .build import call_order, latest_moment, round_of, sorted_messages
from .diagnostics import Problem
from .formats import render
from .history import History
from .jsonfast import dumps
from .options import ReplayOptions
from .units import CallOut, Unit
from .validate import Memo, validate


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
        calls = [c for c in m.tool_calls if as_of is None or c.created_at <= as_of]
        for round_index, group in groupby(sorted(calls, key=call_order), key=round_of):
            outs = []
            for c in group:
                response = c.response
                rc = c.response_created_at
                if as_of is not None and rc is not None and rc > as_of:
                    response = None
                args = c.arguments
                args_json = c.arguments_json
                if args_json is None:
                    args_json = dumps(args) if args is not None else "{}"
                outs.append(
                    CallOut(
                        row_id=c.row_id,
                        call_id=c.external_id,
                        name=c.function_name,
                        arguments=args,
                        arguments_json=args_json,
                        result=response,
                        is_error=c.is_error,
                        sequence_index=c.sequence_index,
                    )
                )
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
