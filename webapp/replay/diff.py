"""Tie a replay's payload back to the stored calls, and compare two replays. Pure: no Flask, no
database.

A payload only carries the ids the provider sees. :func:`payload_call_rows` finds the stored row
behind each of them: an id the replay generated or renamed is named by its ``id_generated`` /
``id_renamed`` diagnostic; any other id is the stored external id. When several stored calls
share an external id, only the first one replayed keeps it (later ones are renamed), so the row
is the one the replay did not leave out.

:func:`diff_replays` compares two replays of the same history (two policies side by side):

* messages: each payload message is keyed by what identifies it (role and text, or the call ids
  it requests or answers) and the two key sequences are aligned; a message is ``same``,
  ``changed`` (same key, other content: a result truncated or compacted differently) or
  ``only`` (on this side alone). Payloads in different formats are not aligned message by
  message (their shapes differ); their calls are still compared.
* calls: stored calls replayed on one side only, each with the other side's diagnostics that
  explain why it is missing there; and calls replayed on both sides with different results.
* stats: the figures of both sides.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from . import Diagnostic, History, ReplayResult
from .formats import payload_messages

Marks = tuple[str, ...]

# Diagnostics that say why something was left out (the others describe a change to something
# that was kept: ids, compaction, truncation, redaction, merged messages).
OMITTING_KINDS = frozenset(
    {
        "after_as_of",
        "run_not_completed",
        "response_missing",
        "stale",
        "round_skipped",
        "trailing_trimmed",
        "pruned",
        "leading_assistant_dropped",
    }
)
ID_KINDS = frozenset({"id_generated", "id_renamed"})

STAT_LABELS = (
    ("messages", "Messages"),
    ("calls_included", "Calls replayed"),
    ("estimated_tokens", "Estimated tokens"),
    ("results_compacted", "Results compacted"),
    ("results_truncated", "Results truncated"),
    ("truncated_tokens", "Tokens cut by truncation"),
    ("units_pruned", "Units pruned"),
    ("over_budget", "Over budget"),
    ("diagnostics", "Diagnostics"),
)


@dataclass(frozen=True, slots=True)
class CallInfo:
    """A stored call, as the comparison names it."""

    row_id: int
    external_id: str
    function_name: str
    message_id: str
    message_row_id: int
    round_index: int
    sequence_index: int


@dataclass(frozen=True, slots=True)
class CallDifference:
    call: CallInfo
    present_in: str  # "a" or "b"
    # The other side's diagnostics for this call, its round or its message.
    why: tuple[Diagnostic, ...]


@dataclass(frozen=True, slots=True)
class ResultDifference:
    """A call replayed on both sides whose result text differs."""

    call: CallInfo
    kinds_a: tuple[str, ...]
    kinds_b: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StatRow:
    key: str
    label: str
    a: Any
    b: Any

    @property
    def differs(self) -> bool:
        return self.a != self.b


@dataclass(frozen=True, slots=True)
class ReplayDiff:
    marks_a: Marks
    marks_b: Marks
    messages_aligned: bool
    only_in_a: tuple[CallDifference, ...]
    only_in_b: tuple[CallDifference, ...]
    results_differ: tuple[ResultDifference, ...]
    stats: tuple[StatRow, ...]

    @property
    def identical(self) -> bool:
        return (
            not self.only_in_a
            and not self.only_in_b
            and not self.results_differ
            and all(m == "same" for m in (*self.marks_a, *self.marks_b))
        )


# --- Payload calls ----------------------------------------------------------------------------


def payload_call_ids(payload: dict[str, Any], fmt: str) -> list[str]:
    """The tool-call ids the payload requests, in order."""
    ids: list[str] = []
    for m in payload_messages(payload, fmt):
        if fmt == "openai-chat":
            ids.extend(c["id"] for c in m.get("tool_calls") or ())
        elif fmt == "openai-responses":
            if m.get("type") == "function_call":
                ids.append(m["call_id"])
        elif isinstance(m.get("content"), list):
            ids.extend(b["id"] for b in m["content"] if b.get("type") == "tool_use")
    return ids


def payload_results(payload: dict[str, Any], fmt: str) -> dict[str, str]:
    """Result text by tool-call id (an Anthropic result without content is ``""``)."""
    results: dict[str, str] = {}
    for m in payload_messages(payload, fmt):
        if fmt == "openai-chat":
            if m.get("role") == "tool":
                results[m["tool_call_id"]] = m.get("content") or ""
        elif fmt == "openai-responses":
            if m.get("type") == "function_call_output":
                results[m["call_id"]] = m.get("output") or ""
        elif isinstance(m.get("content"), list):
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    results[b["tool_use_id"]] = _result_text(b.get("content"))
    return results


def _result_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def stored_calls(history: History) -> dict[int, CallInfo]:
    """Every stored call of the history by row id, in conversation order."""
    calls: dict[int, CallInfo] = {}
    for m in sorted(history.messages, key=lambda m: (m.created_at, m.row_id)):
        for c in sorted(m.tool_calls, key=lambda c: (c.round_index, c.sequence_index, c.row_id)):
            calls[c.row_id] = CallInfo(
                c.row_id,
                c.external_id,
                c.function_name,
                m.external_id,
                m.row_id,
                c.round_index,
                c.sequence_index,
            )
    return calls


class _DiagnosticIndex:
    """A replay's diagnostics by call row, by (message, round) and by message."""

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.by_call: dict[int, list[Diagnostic]] = {}
        self.by_round: dict[tuple[str | None, int], list[Diagnostic]] = {}
        self.by_message: dict[str | None, list[Diagnostic]] = {}
        for d in diagnostics:
            if d.call_row_id is not None:
                self.by_call.setdefault(d.call_row_id, []).append(d)
            elif d.round_index is not None:
                self.by_round.setdefault((d.message_id, d.round_index), []).append(d)
            elif d.message_id is not None:
                self.by_message.setdefault(d.message_id, []).append(d)

    def omitting(self, call: CallInfo) -> tuple[Diagnostic, ...]:
        """Why ``call`` was left out: its own, its round's, else its message's diagnostics."""
        own = [
            d
            for d in (
                *self.by_call.get(call.row_id, ()),
                *self.by_round.get((call.message_id, call.round_index), ()),
            )
            if d.kind in OMITTING_KINDS
        ]
        if own:
            return tuple(own)
        return tuple(
            d for d in self.by_message.get(call.message_id, ()) if d.kind in OMITTING_KINDS
        )

    def call_kinds(self, row_id: int) -> tuple[str, ...]:
        return tuple(d.kind for d in self.by_call.get(row_id, ()))


def payload_call_rows(history: History, result: ReplayResult, fmt: str) -> dict[str, int]:
    """Stored row id of every tool call in the payload, by the id the payload uses."""
    return _call_rows(stored_calls(history), result, fmt, _DiagnosticIndex(result.diagnostics))


def _call_rows(
    calls: dict[int, CallInfo], result: ReplayResult, fmt: str, index: _DiagnosticIndex
) -> dict[str, int]:
    rows: dict[str, int] = {}
    renamed: set[int] = set()
    for d in result.diagnostics:
        if d.kind in ID_KINDS and d.call_row_id is not None:
            rows[d.detail.get("new_id", d.call_id)] = d.call_row_id
            renamed.add(d.call_row_id)
    candidates: dict[str, list[CallInfo]] = {}
    for call in calls.values():
        if call.row_id not in renamed:
            candidates.setdefault(call.external_id, []).append(call)
    for call_id in payload_call_ids(result.payload, fmt):
        if call_id in rows or call_id not in candidates:
            continue
        options = candidates[call_id]
        kept = [c for c in options if not index.omitting(c)] if len(options) > 1 else options
        rows[call_id] = (kept or options)[0].row_id
    return rows


# --- Comparing two replays --------------------------------------------------------------------


def _block_key(block: Any) -> Hashable:
    if not isinstance(block, dict):
        return ("?", repr(block))
    kind = block.get("type")
    if kind == "tool_use":
        return ("tool_use", block.get("id"))
    if kind == "tool_result":
        return ("tool_result", block.get("tool_use_id"))
    return (kind, block.get("text"))


def message_key(message: dict[str, Any], fmt: str) -> Hashable:
    """What identifies a payload message, leaving out what a policy may change in it (the text
    of a result)."""
    if fmt == "openai-chat":
        if message.get("tool_calls"):
            return ("tool_calls", tuple(c.get("id") for c in message["tool_calls"]))
        if message.get("role") == "tool":
            return ("tool", message.get("tool_call_id"))
    elif fmt == "openai-responses":
        kind = message.get("type")
        if kind == "function_call":
            return ("function_call", message.get("call_id"))
        if kind == "function_call_output":
            return ("function_call_output", message.get("call_id"))
    content = message.get("content")
    if isinstance(content, list):
        return (message.get("role"), tuple(_block_key(b) for b in content))
    return (message.get("role"), content)


def align_messages(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], fmt: str
) -> tuple[Marks, Marks]:
    """Mark every message of ``a`` and ``b`` as ``same``, ``changed`` or ``only``."""
    keys_a = [message_key(m, fmt) for m in a]
    keys_b = [message_key(m, fmt) for m in b]
    marks_a = ["only"] * len(a)
    marks_b = ["only"] * len(b)
    matcher = SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            i, j = block.a + k, block.b + k
            mark = "same" if a[i] == b[j] else "changed"
            marks_a[i] = marks_b[j] = mark
    return tuple(marks_a), tuple(marks_b)


def _results_by_row(result: ReplayResult, fmt: str, rows: dict[str, int]) -> dict[int, str]:
    by_id = payload_results(result.payload, fmt)
    return {rows[i]: text for i, text in by_id.items() if i in rows}


def diff_replays(
    history: History, a: ReplayResult, fmt_a: str, b: ReplayResult, fmt_b: str
) -> ReplayDiff:
    """Compare replays ``a`` and ``b`` of ``history``."""
    calls = stored_calls(history)
    index_a, index_b = _DiagnosticIndex(a.diagnostics), _DiagnosticIndex(b.diagnostics)
    rows_a = _call_rows(calls, a, fmt_a, index_a)
    rows_b = _call_rows(calls, b, fmt_b, index_b)
    in_a, in_b = set(rows_a.values()), set(rows_b.values())
    only_in_a = tuple(
        CallDifference(c, "a", index_b.omitting(c)) for r, c in calls.items() if r in in_a - in_b
    )
    only_in_b = tuple(
        CallDifference(c, "b", index_a.omitting(c)) for r, c in calls.items() if r in in_b - in_a
    )
    results_a = _results_by_row(a, fmt_a, rows_a)
    results_b = _results_by_row(b, fmt_b, rows_b)
    results_differ = tuple(
        ResultDifference(c, index_a.call_kinds(r), index_b.call_kinds(r))
        for r, c in calls.items()
        if r in results_a and r in results_b and results_a[r] != results_b[r]
    )
    messages_a = payload_messages(a.payload, fmt_a)
    messages_b = payload_messages(b.payload, fmt_b)
    aligned = fmt_a == fmt_b
    if aligned:
        marks_a, marks_b = align_messages(messages_a, messages_b, fmt_a)
    else:
        marks_a, marks_b = ("only",) * len(messages_a), ("only",) * len(messages_b)
    stats = tuple(
        StatRow(key, label, a.stats.get(key), b.stats.get(key)) for key, label in STAT_LABELS
    )
    return ReplayDiff(marks_a, marks_b, aligned, only_in_a, only_in_b, results_differ, stats)
