"""The diagnostics list of the preview page, with the anchors the timeline links to. Pure.

The timeline links every call to ``<replay page>#call-<row id>``. A replayed call shown in the
chat carries that anchor itself; every other call gets it on the diagnostic that explains its
absence — its own (``stale``, ``response_missing``), else its round's (``trailing_trimmed``,
``round_skipped``, ``pruned``), else its message's (``run_not_completed``, ``after_as_of``).
Each diagnostic also knows what it points at in the timeline: a call or a message (row ids).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from ...replay import Diagnostic, History

# More rows than this make a heavy page; the rest are one "show all" away.
ROW_LIMIT = 400


@dataclass(slots=True)
class DiagnosticRow:
    diagnostic: Diagnostic
    function_name: str | None = None
    call_row_id: int | None = None  # the call it is about, for the timeline link
    message_row_id: int | None = None  # else the message it is about
    anchors: list[str] = field(default_factory=list)  # element ids: "call-<row id>"


@dataclass(frozen=True, slots=True)
class DiagnosticsList:
    rows: list[DiagnosticRow]
    hidden: int  # rows left out by the limit
    counts: list[tuple[str, int]]  # (kind, how many), most frequent first


def diagnostics_list(
    diagnostics: Sequence[Diagnostic],
    history: History,
    *,
    shown_calls: Collection[int],
    limit: int | None = ROW_LIMIT,
    focus_row: int | None = None,
) -> DiagnosticsList:
    """Rows for ``diagnostics``; calls in ``shown_calls`` are anchored in the chat already."""
    message_rows = {m.external_id: m.row_id for m in history.messages}
    names = {c.row_id: c.function_name for m in history.messages for c in m.tool_calls}
    rows = [
        DiagnosticRow(
            d,
            function_name=names.get(d.call_row_id) if d.call_row_id is not None else None,
            call_row_id=d.call_row_id,
            message_row_id=message_rows.get(d.message_id) if d.message_id else None,
        )
        for d in diagnostics
    ]
    _anchor_calls(rows, history, set(shown_calls))
    keep = range(len(rows)) if limit is None else range(min(limit, len(rows)))
    chosen = set(keep)
    if focus_row is not None:
        anchor = f"call-{focus_row}"
        chosen.update(i for i, r in enumerate(rows) if anchor in r.anchors)
    shown = [rows[i] for i in sorted(chosen)]
    counts = Counter(d.kind for d in diagnostics).most_common()
    return DiagnosticsList(shown, len(rows) - len(shown), counts)


def _anchor_calls(rows: list[DiagnosticRow], history: History, anchored: set[int]) -> None:
    by_call: dict[int, int] = {}
    by_round: dict[tuple[str | None, int], int] = {}
    by_message: dict[str | None, int] = {}
    for i, r in enumerate(rows):
        d = r.diagnostic
        if d.call_row_id is not None:
            by_call.setdefault(d.call_row_id, i)
        elif d.round_index is not None:
            by_round.setdefault((d.message_id, d.round_index), i)
        elif d.message_id is not None:
            by_message.setdefault(d.message_id, i)
    for m in history.messages:
        for c in m.tool_calls:
            if c.row_id in anchored:
                continue
            i = by_call.get(c.row_id)
            if i is None:
                i = by_round.get((m.external_id, c.round_index))
            if i is None:
                i = by_message.get(m.external_id)
            if i is not None:
                rows[i].anchors.append(f"call-{c.row_id}")
                anchored.add(c.row_id)
