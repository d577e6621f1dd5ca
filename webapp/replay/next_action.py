"""The model's next action: read from a provider's answer, recorded in the stored history, and
the two compared (issue 25, item 3).

A *next action* is what a model does with a replay: call tools (one round, in order), answer
with text, or neither ("empty": no tool call and no text, which a run reports rather than
hides). When a model writes text and calls tools in the same message, the action is "calls"
and keeps the text beside them: the calls are what the agent acts on.

* :func:`parse_answer` reads a provider's answer (the JSON of the official SDKs' response
  objects: a ChatCompletion, a Response, an anthropic Message) into a :class:`NextAction`;
  anything not of that shape is a :class:`MalformedAnswer` saying what was wrong.
  :func:`parse_usage` reads its token counts.
* :func:`recorded_next_action` is what the agent really did after the replay's cut.
* :func:`compare` classifies the difference into one of :data:`CATEGORIES`.

Arguments are compared as canonical JSON (keys sorted, compact), so key order never matters,
but ``1`` and ``1.0`` or ``true`` and ``1`` differ, as they would for a tool that reads them.
Pure: no I/O; the SDKs are not imported (their JSON is the contract).
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from operator import attrgetter
from typing import Any

from .build import sorted_messages
from .history import History, Message, ToolCall
from .jsonfast import loads

ACTION_KINDS = ("calls", "answer", "empty")


class MalformedAnswer(ValueError):
    """A provider answer (or a stored next action) that is not of the documented shape."""


@dataclass(frozen=True)
class ActionCall:
    """One tool call of a next action. ``arguments``: the parsed JSON object when the text the
    model sent parses as one, else that text as it is."""

    name: str
    arguments: Any
    id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments, "id": self.id}


@dataclass(frozen=True)
class NextAction:
    kind: str  # "calls" | "answer" | "empty"
    calls: tuple[ActionCall, ...] = ()
    text: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ACTION_KINDS)}, not {self.kind!r}")
        if (self.kind == "calls") != bool(self.calls):
            raise ValueError("a next action has calls exactly when its kind is 'calls'")
        if self.kind == "answer" and self.text is None:
            raise ValueError("an answer has text")
        if self.kind == "empty" and self.text is not None:
            raise ValueError("an empty action has no text")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "calls": [c.to_json() for c in self.calls],
            "text": self.text,
        }

    @classmethod
    def from_json(cls, data: Any) -> NextAction:
        """The action :meth:`to_json` gave (as stored with a run); MalformedAnswer otherwise."""
        if not isinstance(data, Mapping):
            raise MalformedAnswer("a next action must be an object")
        calls_raw = data.get("calls", [])
        text = data.get("text")
        if not isinstance(calls_raw, list) or not (text is None or isinstance(text, str)):
            raise MalformedAnswer("a next action has a list of calls and a text or null")
        calls = []
        for i, c in enumerate(calls_raw):
            if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
                raise MalformedAnswer(f"calls[{i}] must be an object with a name")
            call_id = c.get("id")
            if call_id is not None and not isinstance(call_id, str):
                raise MalformedAnswer(f"calls[{i}].id must be a string or null")
            calls.append(ActionCall(c["name"], c.get("arguments"), call_id))
        try:
            return cls(data.get("kind"), tuple(calls), text)  # type: ignore[arg-type]
        except ValueError as exc:
            raise MalformedAnswer(str(exc)) from None


def _action(calls: list[ActionCall], text: str | None) -> NextAction:
    """Calls win; text without non-blank characters is no text."""
    if text is not None and not text.strip():
        text = None
    if calls:
        return NextAction("calls", tuple(calls), text)
    if text is not None:
        return NextAction("answer", (), text)
    return NextAction("empty")


def _arguments(text: Any, where: str) -> Any:
    if not isinstance(text, str):
        raise MalformedAnswer(f"{where} must be a string of JSON")
    try:
        value = loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


# --- Provider answers -----------------------------------------------------------------------


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MalformedAnswer(f"{where} must be an object")
    return value


def _list(value: Any, where: str, *, optional: bool = False) -> list[Any]:
    if value is None and optional:
        return []
    if not isinstance(value, list):
        raise MalformedAnswer(f"{where} must be a list")
    return value


def _str(value: Any, where: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedAnswer(f"{where} must be a string")
    return value


def _openai_chat(answer: Mapping[str, Any]) -> NextAction:
    choices = _list(answer.get("choices"), "choices")
    if not choices:
        raise MalformedAnswer("choices is empty: the answer holds no message")
    message = _obj(_obj(choices[0], "choices[0]").get("message"), "choices[0].message")
    where = "choices[0].message"
    text = _str(message.get("content"), f"{where}.content", optional=True)
    if text is None:  # a refusal is what the model said instead
        text = _str(message.get("refusal"), f"{where}.refusal", optional=True)
    calls = []
    for i, raw in enumerate(_list(message.get("tool_calls"), f"{where}.tool_calls", optional=True)):
        at = f"{where}.tool_calls[{i}]"
        call = _obj(raw, at)
        call_id = _str(call.get("id"), f"{at}.id", optional=True)
        if call.get("type", "function") == "custom":
            custom = _obj(call.get("custom"), f"{at}.custom")
            name = _str(custom.get("name"), f"{at}.custom.name")
            raw_input = _str(custom.get("input"), f"{at}.custom.input")
            calls.append(ActionCall(name or "", raw_input, call_id))
            continue
        function = _obj(call.get("function"), f"{at}.function")
        name = _str(function.get("name"), f"{at}.function.name")
        arguments = _arguments(function.get("arguments"), f"{at}.function.arguments")
        calls.append(ActionCall(name or "", arguments, call_id))
    legacy = message.get("function_call")  # the deprecated single function call
    if legacy is not None and not calls:
        function = _obj(legacy, f"{where}.function_call")
        name = _str(function.get("name"), f"{where}.function_call.name")
        arguments = _arguments(function.get("arguments"), f"{where}.function_call.arguments")
        calls.append(ActionCall(name or "", arguments))
    return _action(calls, text)


def _openai_responses(answer: Mapping[str, Any]) -> NextAction:
    texts: list[str] = []
    calls: list[ActionCall] = []
    for i, raw in enumerate(_list(answer.get("output"), "output")):
        at = f"output[{i}]"
        item = _obj(raw, at)
        kind = _str(item.get("type"), f"{at}.type")
        if kind == "message":
            for j, part in enumerate(_list(item.get("content"), f"{at}.content")):
                part = _obj(part, f"{at}.content[{j}]")
                if part.get("type") == "output_text":
                    texts.append(_str(part.get("text"), f"{at}.content[{j}].text") or "")
                elif part.get("type") == "refusal":
                    texts.append(_str(part.get("refusal"), f"{at}.content[{j}].refusal") or "")
        elif kind == "function_call":
            name = _str(item.get("name"), f"{at}.name") or ""
            call_id = _str(item.get("call_id"), f"{at}.call_id", optional=True)
            arguments = _arguments(item.get("arguments"), f"{at}.arguments")
            calls.append(ActionCall(name, arguments, call_id))
        elif kind == "custom_tool_call":
            name = _str(item.get("name"), f"{at}.name") or ""
            call_id = _str(item.get("call_id"), f"{at}.call_id", optional=True)
            calls.append(ActionCall(name, _str(item.get("input"), f"{at}.input"), call_id))
        # Reasoning, and the tools the provider runs itself (web search, ...), are not actions
        # of the agent.
    # As the SDK's ``Response.output_text``: the text parts, joined as they are.
    return _action(calls, "".join(texts) if texts else None)


def _anthropic(answer: Mapping[str, Any]) -> NextAction:
    texts: list[str] = []
    calls: list[ActionCall] = []
    for i, raw in enumerate(_list(answer.get("content"), "content")):
        at = f"content[{i}]"
        block = _obj(raw, at)
        kind = _str(block.get("type"), f"{at}.type")
        if kind == "text":
            texts.append(_str(block.get("text"), f"{at}.text") or "")
        elif kind == "tool_use":
            name = _str(block.get("name"), f"{at}.name") or ""
            call_id = _str(block.get("id"), f"{at}.id", optional=True)
            if "input" not in block:
                raise MalformedAnswer(f"{at}.input is missing")
            calls.append(ActionCall(name, block["input"], call_id))
        # Thinking and the server's own tools are not actions of the agent.
    return _action(calls, "".join(texts) if texts else None)


_PARSERS = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
}


def parse_answer(fmt: str, answer: Mapping[str, Any]) -> NextAction:
    """The next action in a provider's answer in format ``fmt``; :class:`MalformedAnswer` when
    the answer is not of that format's shape (a ValueError for an unknown format)."""
    parser = _PARSERS.get(fmt)
    if parser is None:
        raise ValueError(f"unknown format {fmt!r}")
    return parser(_obj(answer, "the answer"))


@dataclass(frozen=True)
class Usage:
    """Token counts of one answer, with the pricing module's semantics: ``input_tokens`` is
    every prompt token, the cache reads (and, for Anthropic, the cache writes) among them.
    None: the provider did not say."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    def to_json(self) -> dict[str, int | None]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


def _count(obj: Any, *path: str) -> int | None:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 0 else None


def parse_usage(fmt: str, answer: Mapping[str, Any]) -> Usage:
    """The answer's usage by each provider's field names; a count that is absent or not a
    count is None (a missing usage never fails a run)."""
    usage = answer.get("usage") if isinstance(answer, Mapping) else None
    if fmt == "openai-chat":
        return Usage(
            _count(usage, "prompt_tokens"),
            _count(usage, "completion_tokens"),
            _count(usage, "prompt_tokens_details", "cached_tokens"),
            _count(usage, "prompt_tokens_details", "cache_write_tokens"),
        )
    if fmt == "openai-responses":
        return Usage(
            _count(usage, "input_tokens"),
            _count(usage, "output_tokens"),
            _count(usage, "input_tokens_details", "cached_tokens"),
            _count(usage, "input_tokens_details", "cache_write_tokens"),
        )
    if fmt == "anthropic":
        # Anthropic counts cache reads and writes beside input_tokens, not among them.
        plain = _count(usage, "input_tokens")
        read = _count(usage, "cache_read_input_tokens")
        write = _count(usage, "cache_creation_input_tokens")
        total = None if plain is None else plain + (read or 0) + (write or 0)
        return Usage(total, _count(usage, "output_tokens"), read, write)
    raise ValueError(f"unknown format {fmt!r}")


# --- What the agent did -----------------------------------------------------------------------

_call_order = attrgetter("round_index", "sequence_index", "row_id")


def _round_action(calls: Sequence[ToolCall]) -> NextAction:
    return NextAction(
        "calls",
        tuple(
            # The replay sends missing arguments as {}; so they are compared.
            ActionCall(
                c.function_name, {} if c.arguments is None else c.arguments, c.external_id or None
            )
            for c in sorted(calls, key=_call_order)
        ),
    )


def _text_action(m: Message) -> NextAction | None:
    text = m.content
    return NextAction("answer", (), text) if text is not None and text.strip() else None


def _finished(c: ToolCall, as_of: datetime) -> bool:
    rc = c.response_created_at
    return c.created_at <= as_of and (c.response is None or rc is None or rc <= as_of)


def _after(m: Message, as_of: datetime, persistence: str) -> NextAction | None:
    """What of ``m`` came after ``as_of``, as the agent's next action (None: nothing)."""
    rounds = [
        list(group)
        for _, group in groupby(
            sorted(m.tool_calls, key=_call_order), key=attrgetter("round_index")
        )
    ]
    if m.created_at > as_of:
        return _round_action(rounds[0]) if rounds else _text_action(m)
    late = any(not _finished(c, as_of) for c in m.tool_calls) or any(
        s.created_at is not None and s.created_at > as_of for s in m.service_calls
    )
    if not late:
        return None  # all of it was in place at as_of (replayed, or left out by the policy)
    if persistence == "per-run":
        # A run unfinished at as_of contributes nothing: the replay ends before it, and what
        # the agent did next is the run from its start.
        return _round_action(rounds[0]) if rounds else _text_action(m)
    for calls in rounds:
        if not all(_finished(c, as_of) for c in calls):
            return _round_action(calls)
    return _text_action(m)  # every round done, the final text still to come


def recorded_next_action(
    history: History, as_of: datetime | None, *, persistence: str = "per-run"
) -> NextAction | None:
    """What the agent really did after a replay cut at ``as_of`` (the resolved time the replay
    uses; None: the latest moment in the data, after which nothing follows). None when nothing
    follows.

    A replay at ``as_of`` holds every message created at or before it (``build.py``, rule 1).
    With ``as_of=turn:<n>`` that is the user message starting turn n (and anything stored at
    the same instant), so the answer is the agent's first action in turn n: the first round of
    calls of the run answering it (the calls in order), or its final text when it called no
    tool. A cut inside a run (at a round): in ``per-service-call`` mode the run's rounds that
    were complete at ``as_of`` (every call made and every result back) are replayed, so the
    next action is the first round that was not, else the run's final text; in ``per-run``
    mode (the replay's default) the unfinished run is not replayed at all, so it is the run's
    first round. Empty assistant messages and system messages are passed over; a user message
    after ``as_of`` ends the search (None): what the agent did after it answered a message the
    replay does not hold.
    """
    if as_of is None:
        return None
    for m in sorted_messages(history):
        if m.role == "user":
            if m.created_at > as_of:
                return None
            continue
        if m.role != "assistant":
            continue
        action = _after(m, as_of, persistence)
        if action is not None:
            return action
    return None


# --- The comparison ---------------------------------------------------------------------------

CATEGORIES: tuple[tuple[str, str], ...] = (
    ("same_calls", "Same calls"),
    ("same_tools_other_arguments", "Same tools, other arguments"),
    ("other_tools", "Other tools"),
    ("called_instead_of_answering", "Called tools instead of answering"),
    ("answered_instead_of_calling", "Answered instead of calling"),
    ("same_answer", "Same answer"),
    ("different_answer", "Different answer"),
    ("empty_answer", "Empty answer"),
    ("no_recorded_action", "No recorded action"),
)
LABELS = dict(CATEGORIES)


class _Absent:
    """A side of a JSON change that has no value there (a key or an item only the other has)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Change:
    """One difference between two argument objects, at a JSON Pointer ``path`` ("" is the
    whole value). A side that has nothing there is ``ABSENT`` (left out of the JSON)."""

    path: str
    recorded: Any = ABSENT
    replayed: Any = ABSENT

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.recorded is not ABSENT:
            out["recorded"] = self.recorded
        if self.replayed is not ABSENT:
            out["replayed"] = self.replayed
        return out


@dataclass(frozen=True)
class ArgumentDiff:
    """The argument changes of one recorded call and the replayed call paired with it."""

    name: str
    recorded_index: int
    replayed_index: int
    changes: tuple[Change, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "recorded_index": self.recorded_index,
            "replayed_index": self.replayed_index,
            "changes": [c.to_json() for c in self.changes],
        }


@dataclass(frozen=True)
class Comparison:
    category: str
    label: str
    argument_diffs: tuple[ArgumentDiff, ...] = ()
    # Recorded text → replayed text: "delete" is only in the recorded one, "insert" only in
    # the replayed one.
    word_diff: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "label": self.label,
            "argument_diffs": [d.to_json() for d in self.argument_diffs],
            "word_diff": [list(op) for op in self.word_diff],
        }


def canonical_json(value: Any) -> str:
    """The text two argument values are equal by: keys sorted, compact, non-ASCII kept."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _pointer(path: str, key: str | int) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def json_changes(recorded: Any, replayed: Any, path: str = "") -> list[Change]:
    """Where two JSON values differ: objects key by key (sorted), lists item by item, anything
    else as a whole."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        out: list[Change] = []
        for key in sorted(recorded.keys() | replayed.keys(), key=str):
            here = _pointer(path, key)
            if key not in replayed:
                out.append(Change(here, recorded=recorded[key]))
            elif key not in recorded:
                out.append(Change(here, replayed=replayed[key]))
            else:
                out.extend(json_changes(recorded[key], replayed[key], here))
        return out
    if isinstance(recorded, list) and isinstance(replayed, list):
        out = []
        for i in range(max(len(recorded), len(replayed))):
            here = _pointer(path, i)
            if i >= len(replayed):
                out.append(Change(here, recorded=recorded[i]))
            elif i >= len(recorded):
                out.append(Change(here, replayed=replayed[i]))
            else:
                out.extend(json_changes(recorded[i], replayed[i], here))
        return out
    if canonical_json(recorded) == canonical_json(replayed):
        return []
    return [Change(path, recorded, replayed)]


def _argument_diffs(
    recorded: Sequence[ActionCall], replayed: Sequence[ActionCall]
) -> list[ArgumentDiff]:
    """Pair the calls that are not equal on both sides by name, in order, and diff them."""
    rec_keys = [(c.name, canonical_json(c.arguments)) for c in recorded]
    rep_keys = [(c.name, canonical_json(c.arguments)) for c in replayed]
    equal = Counter(rec_keys) & Counter(rep_keys)  # equal calls pair with each other
    rec_left: list[int] = []
    for i, key in enumerate(rec_keys):
        if equal[key]:
            equal[key] -= 1
        else:
            rec_left.append(i)
    equal = Counter(rec_keys) & Counter(rep_keys)
    rep_left: dict[str, list[int]] = {}
    for i, key in enumerate(rep_keys):
        if equal[key]:
            equal[key] -= 1
        else:
            rep_left.setdefault(key[0], []).append(i)
    diffs = []
    for i in rec_left:
        j = rep_left[recorded[i].name].pop(0)
        changes = json_changes(recorded[i].arguments, replayed[j].arguments)
        diffs.append(ArgumentDiff(recorded[i].name, i, j, tuple(changes)))
    return diffs


def word_diff(recorded: str, replayed: str) -> tuple[tuple[str, str], ...]:
    """difflib's opcodes over words (whitespace-separated), recorded → replayed; a replaced run
    is its deletion then its insertion."""
    a, b = recorded.split(), replayed.split()
    ops: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            ops.append(("equal", " ".join(a[i1:i2])))
            continue
        if i2 > i1:
            ops.append(("delete", " ".join(a[i1:i2])))
        if j2 > j1:
            ops.append(("insert", " ".join(b[j1:j2])))
    return tuple(ops)


def _normalised(text: str | None) -> str:
    return " ".join((text or "").split())


def _result(category: str, **kwargs: Any) -> Comparison:
    return Comparison(category, LABELS[category], **kwargs)


def compare(replayed: NextAction, recorded: NextAction | None) -> Comparison:
    """Classify the replayed next action against the recorded one. Exactly one category:
    ``no_recorded_action`` first (nothing to compare with), then ``empty_answer`` (the model
    did nothing), then by the kinds of the two actions. Calls are compared as a multiset per
    round: order within the round does not matter. A recorded "empty" action counts as an
    answer with no text."""
    if recorded is None:
        return _result("no_recorded_action")
    if replayed.kind == "empty":
        return _result("empty_answer")
    if replayed.kind == "calls":
        if recorded.kind != "calls":
            return _result("called_instead_of_answering")
        rep = Counter((c.name, canonical_json(c.arguments)) for c in replayed.calls)
        rec = Counter((c.name, canonical_json(c.arguments)) for c in recorded.calls)
        if rep == rec:
            return _result("same_calls")
        if Counter(c.name for c in replayed.calls) == Counter(c.name for c in recorded.calls):
            diffs = _argument_diffs(recorded.calls, replayed.calls)
            return _result("same_tools_other_arguments", argument_diffs=tuple(diffs))
        return _result("other_tools")
    if recorded.kind == "calls":
        return _result("answered_instead_of_calling")
    if _normalised(replayed.text) == _normalised(recorded.text):
        return _result("same_answer")
    return _result(
        "different_answer", word_diff=word_diff(recorded.text or "", replayed.text or "")
    )
