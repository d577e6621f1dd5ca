"""Rule 8: fit the replay into a context budget by dropping whole units, oldest first.

Token estimate (format independent, so a budget means the same for every provider): the system
prompt and tool definitions are a fixed cost; each unit costs ``units.MESSAGE_OVERHEAD`` per
message plus the counted text, call names, argument JSON and results. System messages from the
history are fixed as well.

``fifo`` (a FIFO pruner's removable units): drop the oldest user message, assistant round (call
message with all its results) or assistant text, one at a time, until the estimate fits. The
latest user message is never dropped, whatever its position.

``turns``: drop whole user-started turns (a user message and everything up to the next user
message), oldest first; units before the first user message form a turn of their own. The
latest turn is never dropped.

When nothing removable is left and the estimate is still over budget, an ``over_budget``
diagnostic says so and the stats carry ``over_budget: true``; the payload is still valid.

Anthropic conversations must start with a user message. ``drop_leading_assistant`` removes
units before the first user message, both before pruning (an assistant greeting) and after it
(pruning removed the user message an assistant reply answered).
"""

from __future__ import annotations

from .build import Plan
from .units import Unit


def estimate(plan: Plan) -> int:
    return plan.fixed_tokens + sum(u.tokens for u in plan.units)


def _unit_detail(u: Unit) -> dict[str, object]:
    detail: dict[str, object] = {"unit": u.kind, "tokens": u.tokens, "turn": u.turn}
    if u.kind == "round":
        detail["calls"] = [c.call_id for c in u.calls]
    return detail


def _describe(u: Unit) -> str:
    if u.kind == "round":
        return f"the tool-call round {u.round_index} with its {len(u.calls)} result(s)"
    if u.kind == "user":
        return "this user message"
    return "this assistant text"


def _drop(plan: Plan, u: Unit, kind: str, reason: str) -> None:
    plan.log.add(
        u.pos,
        kind,
        reason,
        message_id=u.message_id,
        round_index=u.round_index,
        detail=_unit_detail(u),
    )
    if u.kind == "round":
        plan.omitted[kind] = plan.omitted.get(kind, 0) + len(u.calls)
        plan.counters["calls_included"] -= len(u.calls)


def drop_leading_assistant(plan: Plan) -> None:
    """Anthropic: drop non-system units that come before the first user message."""
    units = plan.units
    first_user = next((i for i, u in enumerate(units) if u.kind == "user"), len(units))
    if not any(u.kind != "system" for u in units[:first_user]):
        return
    kept: list[Unit] = []
    for i, u in enumerate(units):
        if i < first_user and u.kind != "system":
            _drop(
                plan,
                u,
                "leading_assistant_dropped",
                f"Anthropic requires the conversation to start with a user message; "
                f"{_describe(u)} comes before any user message and is dropped.",
            )
        else:
            kept.append(u)
    plan.units = kept


def prune(plan: Plan, budget: int, mode: str) -> bool:
    """Drop units until the estimate fits ``budget``; return True when it still does not."""
    total = estimate(plan)
    if total <= budget:
        return False
    units = plan.units
    latest_user = max((i for i, u in enumerate(units) if u.kind == "user"), default=-1)
    removed = [False] * len(units)
    if mode == "turns":
        latest_turn = max((u.turn for u in units), default=0)
        for i, u in enumerate(units):
            if total <= budget and (i == 0 or units[i - 1].turn != u.turn):
                break  # only stop at a turn boundary: turns go as a whole
            if u.turn >= latest_turn or u.kind == "system":
                continue
            removed[i] = True
            total -= u.tokens
            _drop(
                plan,
                u,
                "pruned",
                f"Over the context budget: turn {u.turn} is one of the oldest turns and is "
                f"dropped as a whole, including {_describe(u)}.",
            )
    else:
        for i, u in enumerate(units):
            if total <= budget:
                break
            if u.kind == "system" or i == latest_user:
                continue
            removed[i] = True
            total -= u.tokens
            _drop(
                plan,
                u,
                "pruned",
                f"Over the context budget: {_describe(u)} is the oldest removable unit and is "
                "dropped.",
            )
    plan.units = [u for u, gone in zip(units, removed, strict=True) if not gone]
    return total > budget
