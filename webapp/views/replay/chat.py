"""The replay payload as a chat for the preview page. Pure: no Flask, no database.

Whatever the format, the payload becomes a list of entries: a text bubble (system, user or
assistant) or a *round* — an assistant's tool calls, each shown with its result right below it,
however the format spreads them over messages (OpenAI: one ``tool`` message or
``function_call_output`` item per result; Anthropic: ``tool_result`` blocks in the next user
message). Every entry remembers which payload messages it came from, so a comparison can mark
it; every call knows its stored row (anchors ``#call-<row id>``) and the kinds of diagnostics
that touched it (badges).

Long conversations: only a window of entries is rendered (see :func:`window`), the rest is in
the raw JSON and the download.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...replay import Diagnostic, History, jsonfast
from ...replay.formats import payload_messages

# Rendering more than this many entries makes a heavy page; the window keeps the latest ones.
ENTRY_LIMIT = 300

# Diagnostic kinds shown as badges on a replayed call, with their labels.
CALL_BADGES = {
    "id_generated": "id generated",
    "id_renamed": "id renamed",
    "tool_name_renamed": "name renamed",
    "compacted": "compacted",
    "truncated": "truncated",
    "redacted": "redacted",
}


@dataclass(frozen=True, slots=True)
class ChatCall:
    call_id: str
    name: str
    arguments: Any  # the parsed arguments object (the payload may hold it as JSON text)
    result: str | None  # None: the payload holds no result for it (never in a valid payload)
    is_error: bool
    row_id: int | None
    badges: tuple[tuple[str, str, str], ...] = ()  # (kind, label, reason)
    mark: str = ""  # comparison: "same", "changed" or "only"


@dataclass(frozen=True, slots=True)
class ChatEntry:
    kind: str  # "text" or "round"
    role: str  # system, user, assistant
    text: str = ""
    calls: tuple[ChatCall, ...] = ()
    indexes: tuple[int, ...] = ()  # payload messages it comes from (-1: a top-level field)
    mark: str = ""
    blocks: int = 1  # text blocks of one payload message shown together (Anthropic merges)


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return jsonfast.loads(value)
        except ValueError:
            return value
    return value


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(
        b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
    )


@dataclass(frozen=True, slots=True)
class _Request:
    """A tool call found in the payload, before its result is attached."""

    call_id: str
    name: str
    arguments: Any
    index: int


def _walk(payload: dict[str, Any], fmt: str) -> list[tuple[str, Any]]:
    """The payload as a flat list of ``("text", (role, text, index))``, ``("call", _Request)``
    and ``("result", (call_id, text, is_error, index))`` events, in payload order."""
    events: list[tuple[str, Any]] = []
    top = payload.get("instructions") if fmt == "openai-responses" else payload.get("system")
    if fmt != "openai-chat" and top:
        events.append(("text", ("system", _text(top), -1)))
    for i, m in enumerate(payload_messages(payload, fmt)):
        role = m.get("role", "")
        if fmt == "openai-chat":
            if m.get("tool_calls"):
                for c in m["tool_calls"]:
                    fn = c.get("function", {})
                    events.append(
                        ("call", _Request(c["id"], fn.get("name", ""), fn.get("arguments"), i))
                    )
            elif role == "tool":
                events.append(("result", (m["tool_call_id"], _text(m.get("content")), False, i)))
            else:
                events.append(("text", (role, _text(m.get("content")), i)))
        elif fmt == "openai-responses":
            kind = m.get("type")
            if kind == "function_call":
                events.append(
                    ("call", _Request(m["call_id"], m.get("name", ""), m.get("arguments"), i))
                )
            elif kind == "function_call_output":
                events.append(("result", (m["call_id"], _text(m.get("output")), False, i)))
            else:
                events.append(("text", (role, _text(m.get("content")), i)))
        else:
            content = m.get("content")
            if not isinstance(content, list):
                events.append(("text", (role, _text(content), i)))
                continue
            for b in content:
                kind = b.get("type")
                if kind == "tool_use":
                    events.append(("call", _Request(b["id"], b.get("name", ""), b.get("input"), i)))
                elif kind == "tool_result":
                    result = (b["tool_use_id"], _text(b.get("content")), bool(b.get("is_error")), i)
                    events.append(("result", result))
                elif kind == "text":
                    events.append(("text", (role, b.get("text", ""), i)))
    return events


def chat_entries(
    payload: dict[str, Any],
    fmt: str,
    call_rows: Mapping[str, int],
    diagnostics: Sequence[Diagnostic],
    history: History,
) -> list[ChatEntry]:
    """The payload as chat entries, calls paired with their results."""
    errors = {c.row_id for m in history.messages for c in m.tool_calls if c.is_error}
    badges: dict[int, list[tuple[str, str, str]]] = {}
    for d in diagnostics:
        if d.call_row_id is not None and d.kind in CALL_BADGES:
            badges.setdefault(d.call_row_id, []).append((d.kind, CALL_BADGES[d.kind], d.reason))
    results = {e[1][0]: e[1] for e in _walk(payload, fmt) if e[0] == "result"}
    entries: list[ChatEntry] = []
    pending: list[_Request] = []

    def flush() -> None:
        if not pending:
            return
        calls = []
        indexes = {r.index for r in pending}
        for r in pending:
            row = call_rows.get(r.call_id)
            found = results.get(r.call_id)
            if found is not None:
                indexes.add(found[3])
            calls.append(
                ChatCall(
                    call_id=r.call_id,
                    name=r.name,
                    arguments=_arguments(r.arguments),
                    result=found[1] if found is not None else None,
                    is_error=(found is not None and found[2]) or row in errors,
                    row_id=row,
                    badges=tuple(badges.get(row, ())) if row is not None else (),
                )
            )
        entries.append(
            ChatEntry("round", "assistant", calls=tuple(calls), indexes=tuple(sorted(indexes)))
        )
        pending.clear()

    answered = False  # a result came after the pending calls: the next call starts a round
    for kind, value in _walk(payload, fmt):
        if kind == "call":
            # One round per requesting message; Responses items are one call each, and a
            # round there ends where its results begin.
            if pending:
                same_message = fmt == "openai-responses" or value.index == pending[-1].index
                if answered or not same_message:
                    flush()
            answered = False
            pending.append(value)
        elif kind == "result":
            answered = True
        elif kind == "text":
            flush()
            role, text, index = value
            last = entries[-1] if entries else None
            if last and last.kind == "text" and index >= 0 and last.indexes == (index,):
                merged = f"{last.text}\n\n{text}"
                entries[-1] = replace(last, text=merged, blocks=last.blocks + 1)
            else:
                entries.append(ChatEntry("text", role, text=text, indexes=(index,)))
    flush()
    return entries


def mark_entries(entries: Sequence[ChatEntry], marks: Sequence[str]) -> list[ChatEntry]:
    """Entries marked from a comparison's per-message marks (``only`` wins over ``changed``
    over ``same``). A round's calls take the round's mark: its messages carry all of them."""
    order = {"same": 0, "changed": 1, "only": 2}
    out = []
    for e in entries:
        found = [marks[i] for i in e.indexes if 0 <= i < len(marks)]
        mark = max(found, key=order.__getitem__) if found else "same"
        calls = tuple(replace(c, mark=mark) for c in e.calls)
        out.append(replace(e, calls=calls, mark=mark))
    return out


@dataclass(frozen=True, slots=True)
class Window:
    start: int
    end: int
    total: int

    @property
    def hidden_before(self) -> int:
        return self.start

    @property
    def hidden_after(self) -> int:
        return self.total - self.end


def window(
    entries: Sequence[ChatEntry],
    *,
    limit: int | None = ENTRY_LIMIT,
    focus_row: int | None = None,
) -> Window:
    """Which entries to render: all when they fit; else the latest ``limit``, or ``limit``
    entries around the round holding call ``focus_row`` (a link to ``#call-<row id>``)."""
    total = len(entries)
    if limit is None or total <= limit:
        return Window(0, total, total)
    at = None
    if focus_row is not None:
        at = next(
            (i for i, e in enumerate(entries) if any(c.row_id == focus_row for c in e.calls)),
            None,
        )
    if at is None:
        return Window(total - limit, total, total)
    start = max(0, min(at - limit // 2, total - limit))
    return Window(start, start + limit, total)
