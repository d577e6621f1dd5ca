"""The neutral turn structure between the rules and the provider renderers.

A replay is first built as a list of *units* in conversation order; every unit is either kept
or dropped as a whole, so pruning never separates a call from its results:

``system``  a system message from the history (fixed cost, never pruned)
``user``    one user message
``round``   one assistant tool-call message together with all of its results
``text``    one assistant text message

Renderers turn the kept units into a provider payload; the budget works on units, never on
rendered messages, so a call and its result cannot be separated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

from .diagnostics import Diagnostic

UnitKind = Literal["system", "user", "round", "text"]

# Estimated per-message framing cost (role, separators), as in OpenAI's token counting recipe.
MESSAGE_OVERHEAD = 4


@dataclass(slots=True)
class CallOut:
    """A tool call as it will be sent: final id, arguments and (possibly processed) result."""

    row_id: int
    call_id: str
    name: str
    arguments: dict[str, Any] | None
    arguments_json: str
    result: str | None
    is_error: bool
    sequence_index: int


@dataclass(slots=True)
class Unit:
    kind: UnitKind
    pos: int
    message_id: str
    turn: int
    text: str = ""
    round_index: int | None = None
    calls: list[CallOut] = field(default_factory=list)
    tokens: int = 0


_sort_key = itemgetter(0, 1, 2, 3)
_ROUND_LAST = 1 << 30


class DiagnosticLog:
    """Collects diagnostics from every stage and returns them in conversation order.

    Each entry is keyed by (message position, round, sequence); entries with the same key keep
    the order in which they were added. Message-level entries come first, and a round-level
    entry (e.g. ``round_skipped``) comes after the entries of that round's calls. Global
    entries use position -1 (before everything) or a position after the last message.
    """

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[tuple[Any, ...]] = []

    def add(
        self,
        pos: int,
        kind: str,
        reason: str,
        *,
        message_id: str | None = None,
        round_index: int | None = None,
        sequence_index: int | None = None,
        call_row_id: int | None = None,
        call_id: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        # Stored as a flat tuple whose first four items are the sort key; the Diagnostic is
        # only built in ordered(), which keeps logging cheap in the per-call hot path.
        self._entries.append(
            (
                pos,
                -1 if round_index is None else round_index,
                # round-level entries (no sequence) follow the entries of that round's calls
                _ROUND_LAST if sequence_index is None else sequence_index,
                len(self._entries),
                kind,
                reason,
                message_id,
                round_index,
                call_row_id,
                call_id,
                detail,
            )
        )

    def ordered(self) -> tuple[Diagnostic, ...]:
        entries = sorted(self._entries, key=_sort_key)
        return tuple(
            Diagnostic(e[4], e[5], e[6], e[7], e[8], e[9], {} if e[10] is None else e[10])
            for e in entries
        )

    def __len__(self) -> int:
        return len(self._entries)
