"""Replay: turn a stored conversation into the payload an LLM would receive on the next turn.

A pure library — no Flask, no database, no I/O, no clock. The caller loads a :class:`History`
and resolves :class:`ReplayOptions` (freshness from request / channel / project, ``as_of``
defaulting to "now" if it wants that), then::

    result = replay(history, options)
    result.payload       # provider payload, e.g. {"messages": [...], "tools": [...]}
    result.diagnostics   # why each stored call or round was (not) included, in conversation order
    result.stats         # counts, token estimate, budget
    validate(result.payload, options.format)      # [] — what a provider would reject
    naive_replay_problems(history, options)       # what replaying raw rows would break

Pipeline: ``build`` (rules 1-7 → neutral units) → ``budget`` (rule 8, whole units) →
``formats`` (rule 9). Each module's docstring documents its rule and the decisions taken where
the design is silent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from . import budget
from .build import build_plan, sorted_messages
from .diagnostics import Diagnostic, Problem
from .formats import payload_messages, render
from .history import History, Message, ServiceCall, ToolCall, ToolDefinition
from .naive import naive_payload, naive_replay_problems
from .options import FORMATS, ReplayOptions, heuristic_tokens
from .synthetic import make_synthetic_history
from .validate import validate

__all__ = [
    "FORMATS",
    "Diagnostic",
    "History",
    "Message",
    "Problem",
    "ReplayOptions",
    "ReplayResult",
    "ServiceCall",
    "ToolCall",
    "ToolDefinition",
    "TurnStart",
    "heuristic_tokens",
    "make_synthetic_history",
    "naive_payload",
    "naive_replay_problems",
    "replay",
    "turn_starts",
    "validate",
]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    payload: dict[str, Any] = field(hash=False)
    diagnostics: tuple[Diagnostic, ...]
    stats: dict[str, Any] = field(hash=False)
    next_source_number: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: payload, diagnostics, stats and the next free source number."""
        return {
            "payload": self.payload,
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "stats": self.stats,
            "next_source_number": self.next_source_number,
        }


class TurnStart(NamedTuple):
    """A user message that starts a turn; pass ``created_at`` as ``as_of`` to replay it."""

    index: int  # 0-based turn number
    message_id: str
    created_at: datetime


def turn_starts(history: History) -> list[TurnStart]:
    """The start of every turn (each user message), in conversation order."""
    users = (m for m in sorted_messages(history) if m.role == "user")
    return [TurnStart(i, m.external_id, m.created_at) for i, m in enumerate(users)]


def replay(history: History, options: ReplayOptions | None = None) -> ReplayResult:
    """Build the provider payload for ``history`` under ``options`` (defaults if None).

    A long history allocates many objects: run a whole replay job under
    :func:`webapp.replay.gc_pause.gc_paused` (the pure core leaves process-wide switches to its
    caller)."""
    return _replay(history, options or ReplayOptions())


def _replay(history: History, options: ReplayOptions) -> ReplayResult:
    fmt = options.format
    plan = build_plan(history, options)
    if fmt == "anthropic":
        budget.drop_leading_assistant(plan)
    if options.context_budget is not None:
        budget.prune(plan, options.context_budget, options.prune)
        if fmt == "anthropic":
            budget.drop_leading_assistant(plan)
    estimated = budget.estimate(plan)
    over = options.context_budget is not None and estimated > options.context_budget
    if over:
        plan.log.add(
            plan.end_pos,
            "over_budget",
            f"Even after dropping every removable message the replay needs about {estimated} "
            f"tokens, more than the {options.context_budget}-token budget.",
            detail={"estimated_tokens": estimated, "budget": options.context_budget},
        )
    payload = render(plan.units, plan.system_prompt, plan.tools, fmt, plan.log)
    messages = payload_messages(payload, fmt)
    if not messages:
        plan.log.add(
            plan.end_pos,
            "empty_payload",
            "Nothing is left to send: the replay has no messages, which providers reject.",
        )
    counters = plan.counters
    stats: dict[str, Any] = {
        "format": fmt,
        "as_of": plan.as_of.isoformat() if plan.as_of is not None else None,
        "freshness_seconds": options.freshness_seconds,
        "persistence": options.persistence,
        "messages": len(messages),
        "calls_total": counters["calls_total"],
        "calls_included": counters["calls_included"],
        "calls_omitted": dict(sorted(plan.omitted.items())),
        "results_compacted": counters["results_compacted"],
        "results_truncated": counters["results_truncated"],
        "truncated_tokens": counters["truncated_tokens"],
        "fixed_tokens": plan.fixed_tokens,
        "estimated_tokens": estimated,
        "budget": options.context_budget,
        "over_budget": over,
    }
    diagnostics = plan.log.ordered()
    stats["units_pruned"] = sum(1 for d in diagnostics if d.kind == "pruned")
    stats["diagnostics"] = len(diagnostics)
    return ReplayResult(
        payload=payload,
        diagnostics=diagnostics,
        stats=stats,
        next_source_number=plan.next_source_number,
    )
