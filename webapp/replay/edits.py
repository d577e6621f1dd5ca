"""Edits: "what if…" changes to a stored history before it is replayed and sent to a model.

A run (issue 25) may carry a list of edits, each a ``{"type": ...}`` object:

=======================  =======================  =============================================
type                     fields                   effect
=======================  =======================  =============================================
``replace_result``       ``call_id``, ``content``  the call's result becomes ``content`` (an
                                                   error mark is cleared)
``fail_call``            ``call_id``, ``message``  the call failed with ``message`` as its result
                                                   (Anthropic: ``is_error``; OpenAI formats send
                                                   the text, as for every stored error)
``drop_call``            ``call_id``               the call and its result are gone
``append_user_message``  ``content``               a user message after everything the replay
                                                   holds
=======================  =======================  =============================================

:func:`parse_edits` reads them (an :class:`EditError` names the edit and the field: the API's
422), :func:`apply_edits` returns a new :class:`History` (never mutating the old one). Edits
are applied in order, so a later edit of the same call wins, and an edit of a call an earlier
edit dropped is an error.

Decisions, since the issue leaves them open:

* **Which call.** ``call_id`` is the id the agent gave the call (``ToolCall.external_id``), as
  the replay shows it. The replay shows another id where it had to (``ids.py``: an empty id is
  generated, a duplicate or an id the provider refuses is renamed); those ids are derived from
  stable data, so they name their call too. An external id that several calls share is
  ambiguous: an error that lists the derived ids which name each of them.
* **Edits change the data, never the policy.** A replaced or failed result keeps the stored
  result's time, so freshness, trimming and compaction decide about it as about the original;
  a call that had no result gets one without a time of its own (as old as the call). If the
  replay leaves the result out (stale, trailing), its diagnostics say why.
* **The cut (``as_of``).** Pass the replay's resolved ``as_of`` (None: the latest moment in
  the data, the replay's default). A call made after it, or whose result arrived after it, is
  not in the replay: editing it would change nothing the model sees, or worse, end a run that
  was still in progress at ``as_of`` and so leak its final text from the future. Such an edit
  is an :class:`EditError`.
* **Appended user messages** are stored at ``as_of`` (else at the latest moment in the data)
  with row ids after every other message, so they sort after everything a replay at ``as_of``
  holds and before nothing it holds; several appear in their order. With ``as_of=turn:n`` the
  new message sorts after turn n's user message, so ``turn:n`` still names the same turn. The
  latest moment stays the latest, so a replay without ``as_of`` keeps its cut too.
* **Dropping the only call of a round** leaves no round: the replay has nothing to render for
  it, and providers never see an assistant message without content. Dropping the last call of
  an assistant message without text makes an empty message, which the replay skips (with a
  diagnostic), as it skips any empty message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from operator import attrgetter
from typing import Any

from .build import latest_moment, sorted_messages
from .history import History, Message, ToolCall
from .ids import derive_id

# One request's worth: the API's body limit bounds the bytes, this the work.
MAX_EDITS = 1000

# The fields of each edit type, all required, nothing else allowed.
EDIT_FIELDS: dict[str, tuple[str, ...]] = {
    "replace_result": ("call_id", "content"),
    "fail_call": ("call_id", "message"),
    "drop_call": ("call_id",),
    "append_user_message": ("content",),
}
EDIT_TYPES: tuple[str, ...] = tuple(EDIT_FIELDS)


class EditError(ValueError):
    """An edit that cannot be used: ``index`` is its place in the list, ``field`` the field at
    fault (both None when the list itself is wrong). ``str()`` is the message for people."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None):
        where = "edits" if index is None else f"edits[{index}]"
        if field is not None:
            where += f".{field}"
        super().__init__(f"{where}: {message}")
        self.index = index
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Edit:
    type: str
    call_id: str | None = None
    content: str | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The edit as the API takes it: its type and its own fields only."""
        out: dict[str, Any] = {"type": self.type}
        for name in EDIT_FIELDS.get(self.type, ()):
            out[name] = getattr(self, name)
        return out


# --- Reading them ---------------------------------------------------------------------------


def parse_edits(raw: Any) -> list[Edit]:
    """The edits of a request body (None: no edits). Raises :class:`EditError` naming the edit
    and the field at fault."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise EditError(f"must be a list of edits, not {_json_type(raw)}")
    if len(raw) > MAX_EDITS:
        raise EditError(f"at most {MAX_EDITS} edits, not {len(raw)}")
    return [_parse_one(i, item) for i, item in enumerate(raw)]


def _parse_one(i: int, item: Any) -> Edit:
    if not isinstance(item, dict):
        raise EditError(f"must be an object with a 'type', not {_json_type(item)}", index=i)
    kind = item.get("type")
    if kind not in EDIT_FIELDS:
        if "type" not in item:
            raise EditError("is missing", index=i, field="type")
        raise EditError(
            f"must be one of {', '.join(EDIT_TYPES)}, not {_short(kind)}", index=i, field="type"
        )
    fields = EDIT_FIELDS[kind]
    extra = sorted(str(k) for k in item if k != "type" and k not in fields)
    if extra:
        raise EditError(
            f"is not a field of {kind} (it takes {', '.join(fields)})", index=i, field=extra[0]
        )
    values: dict[str, str] = {}
    for name in fields:
        if name not in item:
            raise EditError(f"is missing ({kind} takes {', '.join(fields)})", index=i, field=name)
        value = item[name]
        if not isinstance(value, str):
            raise EditError(f"must be a string, not {_json_type(value)}", index=i, field=name)
        if name == "call_id" and not value:
            raise EditError("must not be empty", index=i, field=name)
        if kind == "append_user_message" and not value.strip():
            # The replay skips an empty user message (providers reject it): the edit would do
            # nothing while looking as if it did something.
            raise EditError("must have some text", index=i, field=name)
        values[name] = value
    return Edit(type=kind, **values)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- Applying them --------------------------------------------------------------------------

_call_order = attrgetter("round_index", "sequence_index", "row_id")


def _derived_ids(history: History, m: Message, c: ToolCall) -> tuple[str, ...]:
    """The ids the replay may show for ``c`` instead of its own (``ids.IdAllocator``): the
    generated one for an empty id, the renamed one otherwise (first attempt; a hash collision
    that needs a second is beyond belief)."""
    parts = (history.conversation_id, m.external_id, c.round_index, c.sequence_index)
    if not c.external_id:
        return (derive_id(*parts),)
    return (derive_id(*parts, c.external_id),)


class _Calls:
    """Where each call is: by external id and by the ids the replay derives."""

    def __init__(self, history: History) -> None:
        self.by_external: dict[str, list[tuple[int, int]]] = {}
        self.by_derived: dict[str, tuple[int, int]] = {}
        for mi, m in enumerate(history.messages):
            for ci, c in enumerate(m.tool_calls):
                if c.external_id:
                    self.by_external.setdefault(c.external_id, []).append((mi, ci))
                for derived in _derived_ids(history, m, c):
                    self.by_derived[derived] = (mi, ci)


def apply_edits(
    history: History, edits: Sequence[Edit], *, as_of: datetime | None = None
) -> History:
    """``history`` with ``edits`` applied in order, as a new History (``history`` is left as it
    is). ``as_of``: the replay's resolved cut (None: the latest moment in the data). Raises
    :class:`EditError` for a call that is not there, is ambiguous, or lies after ``as_of``."""
    if not edits:
        return history
    index = _Calls(history)
    # Per message: its calls by position, None once dropped. Only edited messages are copied.
    calls: dict[int, list[ToolCall | None]] = {}
    dropped_by: dict[tuple[int, int], int] = {}
    appended: list[str] = []
    for i, edit in enumerate(edits):
        if edit.type == "append_user_message":
            appended.append(edit.content or "")
            continue
        if edit.type not in EDIT_FIELDS:
            raise EditError(f"unknown edit type {_short(edit.type)}", index=i, field="type")
        mi, ci = _find(history, index, edit.call_id or "", i, as_of)
        if (mi, ci) in dropped_by:
            raise EditError(
                f"call {edit.call_id!r} was dropped by edits[{dropped_by[(mi, ci)]}]",
                index=i,
                field="call_id",
            )
        row = calls.setdefault(mi, list(history.messages[mi].tool_calls))
        c = row[ci]
        assert c is not None
        if edit.type == "drop_call":
            row[ci] = None
            dropped_by[(mi, ci)] = i
        elif edit.type == "replace_result":
            row[ci] = replace(c, response=edit.content or "", is_error=False, redacted=False)
        else:  # fail_call
            row[ci] = replace(c, response=edit.message or "", is_error=True, redacted=False)
    messages = list(history.messages)
    for mi, row in calls.items():
        messages[mi] = replace(messages[mi], tool_calls=tuple(c for c in row if c is not None))
    if appended:
        messages.extend(_appended_messages(history, appended, as_of))
    return replace(history, messages=tuple(messages))


def _find(
    history: History, index: _Calls, call_id: str, i: int, as_of: datetime | None
) -> tuple[int, int]:
    found = index.by_external.get(call_id)
    if found is None:
        derived = index.by_derived.get(call_id)
        found = [derived] if derived is not None else []
    if not found:
        raise EditError(
            f"there is no call {_short(call_id)} in this conversation", index=i, field="call_id"
        )
    if len(found) > 1:
        names = ", ".join(
            _derived_ids(history, history.messages[mi], history.messages[mi].tool_calls[ci])[0]
            for mi, ci in found
        )
        raise EditError(
            f"{len(found)} calls share the id {_short(call_id)}; name the one you mean by the id "
            f"the replay derives for it ({names})",
            index=i,
            field="call_id",
        )
    mi, ci = found[0]
    if as_of is not None:
        m = history.messages[mi]
        c = m.tool_calls[ci]
        when = as_of.isoformat()
        if m.created_at > as_of or c.created_at > as_of:
            raise EditError(
                f"call {_short(call_id)} was made after the replay's as-of time ({when}), so the "
                "replay does not hold it and the edit would change nothing",
                index=i,
                field="call_id",
            )
        rc = c.response_created_at
        if c.response is not None and rc is not None and rc > as_of:
            raise EditError(
                f"the result of call {_short(call_id)} arrived after the replay's as-of time "
                f"({when}); at that moment the call was still running and its run unfinished, "
                "so there is no result to edit",
                index=i,
                field="call_id",
            )
    return mi, ci


def _appended_messages(
    history: History, contents: list[str], as_of: datetime | None
) -> list[Message]:
    """User messages that sort after everything a replay at ``as_of`` holds (module docstring)."""
    at = as_of if as_of is not None else latest_moment(sorted_messages(history))
    if at is None:  # an empty conversation: any time will do, this one is stable
        at = datetime.fromisoformat("2000-01-01T00:00:00+00:00")
    next_row = max((m.row_id for m in history.messages), default=0) + 1
    return [
        Message(next_row + k, f"edit-user-{k + 1}", "user", text, at)
        for k, text in enumerate(contents)
    ]
