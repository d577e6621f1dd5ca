"""Naive replay: the stored rows sent as they are, to show what the replay rules prevent.

The naive payload applies none of the rules except ``as_of`` (rows created later do not exist;
a response created later is missing): every stored call in ``(round, sequence)`` order per
message, calls without a response sent without a result, ids as stored (empty or duplicated),
unfinished runs included, no freshness window, no trimming, compaction, truncation, budget or
role merging. ``naive_replay_problems`` lists what validating it would find, so a page can list
what would break (without building it: see below).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from itertools import groupby
from typing import Any

from .build import call_order, latest_moment, round_of, sorted_messages
from .diagnostics import Problem
from .formats import render, render_tools
from .history import History, ToolCall, ToolDefinition
from .jsonfast import dumps
from .options import ReplayOptions
from .units import CallOut, Unit
from .validate import (
    Memo,
    _Checker,
    anthropic_tools,
    anthropic_unanswered,
    chat_tools,
    chat_unanswered,
    responses_tools,
    responses_unanswered,
)


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
    """What a provider would reject if the raw stored rows were replayed as they are:
    ``validate(naive_payload(history, options), options.format, memo)``, the same problems in
    the same order, found without building that payload (a second payload of 10,000 calls
    cost as much as checking it). With the ``memo`` of the replay's own validation, the
    arguments and names it checked are not checked again (the naive payload sends the same
    ones)."""
    fmt = options.format
    check = _CHECKS.get(fmt)
    if check is None:
        raise ValueError(f"unknown format {fmt!r}")
    ck = _Checker(memo)
    system = history.system_prompt or None
    tools = list(history.tool_definitions)
    check(ck, _naive_parts(history, options), system, tools)
    return ck.problems


# --- The naive payload's problems, from its parts ------------------------------------------------
#
# Each checker below walks the messages ``naive_payload`` would render, in its order, and makes
# the checks ``validate`` makes on them, with the same paths and words. It skips what cannot
# fail for a rendered naive payload (every message is an object with a known role, a round has
# at least one call, a result or a user text is a string). tests/test_replay_validate.py
# compares both on hypothesis histories in every format.

# A part of the naive payload: (kind, text) for a text message, ("round", [(call, response at
# as_of), ...]) for one round of a run.
_Part = tuple[str, Any]


def _naive_parts(history: History, options: ReplayOptions) -> list[_Part]:
    """The units ``naive_payload`` renders, as plain tuples: ("user" | "system", text),
    ("text", assistant text) and ("round", [(call, response at as_of), ...])."""
    messages = sorted_messages(history)
    as_of = options.as_of or latest_moment(messages)
    parts: list[_Part] = []
    for m in messages:
        if as_of is not None and m.created_at > as_of:
            continue
        if m.role != "assistant":
            parts.append(("user" if m.role == "user" else "system", m.content or ""))
            continue
        calls = m.tool_calls
        if as_of is not None:
            calls = [c for c in calls if c.created_at <= as_of]
        for _, group in groupby(sorted(calls, key=call_order), key=round_of):
            parts.append(("round", [(c, _response_at(c, as_of)) for c in group]))
        if m.content:
            parts.append(("text", m.content))
    return parts


# What each OpenAI format calls a result, its id field and a call, and why an unknown id is
# wrong: the words `validate` uses (`_Checker.answer`).
_CHAT_ANSWER = (
    ("tool message", "tool_call_id", "tool call"),
    "but the assistant message right before it did not call a tool with that id (or it was "
    "answered too late)",
)
_RESPONSES_ANSWER = (
    ("function_call_output", "call_id", "function_call"),
    "but no function_call waiting for an answer has that call_id",
)


def _check_answers(
    ck: _Checker,
    round_: list[tuple[ToolCall, str | None]],
    prefix: str,
    i: int,
    pending: dict[str, str],
    answered: set[str],
    words: tuple[tuple[str, str, str], str],
) -> int:
    """The result messages that follow a round in an OpenAI payload, from position ``i`` of
    ``prefix``; the position after them."""
    for c, response in round_:
        if response is None:
            continue
        call_id = c.external_id
        if type(call_id) is str and call_id in pending:  # the usual case, inline
            del pending[call_id]
            answered.add(call_id)
        else:
            ck.answer(call_id, f"{prefix}[{i}]", pending, answered, *words)
        i += 1
    return i


def _check_chat(
    ck: _Checker, parts: list[_Part], system: str | None, tools: list[ToolDefinition]
) -> None:
    if not system and not parts:
        ck.add("empty_payload", "messages", "there must be at least one message")
        return
    if tools:
        chat_tools(render_tools(tools, "openai-chat"), ck)
    pending: dict[str, str] = {}
    answered: set[str] = set()
    valid_names = ck.valid_names
    i = 1 if system else 0
    for kind, value in parts:
        path = f"messages[{i}]"
        if pending:
            chat_unanswered(ck, pending, path)
        i += 1
        if kind != "round":
            continue  # a text message: a non-empty string for the assistant, a string else
        for j, (c, _) in enumerate(value):
            cpath = f"{path}.tool_calls[{j}]"
            name = c.function_name
            if not isinstance(name, str):
                ck.add("bad_shape", cpath, "a tool call needs a function with a name")
                continue
            if name not in valid_names:
                ck.tool_name(name, f"{cpath}.function.name")
            ck.openai_call(
                _arguments_json(c),
                f"{cpath}.function.arguments",
                c.external_id,
                cpath,
                "openai-chat",
                pending,
            )
        i = _check_answers(ck, value, "messages", i, pending, answered, _CHAT_ANSWER)
    if pending:
        chat_unanswered(ck, pending, "end of messages")


def _check_responses(
    ck: _Checker, parts: list[_Part], system: str | None, tools: list[ToolDefinition]
) -> None:
    if not parts:
        ck.add("empty_payload", "input", "there must be at least one input item")
        return
    if tools:
        responses_tools(render_tools(tools, "openai-responses"), ck)
    pending: dict[str, str] = {}
    answered: set[str] = set()
    valid_names = ck.valid_names
    i = 0
    for kind, value in parts:
        if kind != "round":
            if pending:
                responses_unanswered(ck, pending, f"input[{i}]")
            i += 1
            continue
        for c, _ in value:
            path = f"input[{i}]"
            i += 1
            name = c.function_name
            if not isinstance(name, str) or not name:
                ck.add("bad_shape", path, "a function_call needs a name")
            elif name not in valid_names:
                ck.tool_name(name, f"{path}.name")
            ck.openai_call(
                _arguments_json(c),
                f"{path}.arguments",
                c.external_id,
                path,
                "openai-responses",
                pending,
            )
        i = _check_answers(ck, value, "input", i, pending, answered, _RESPONSES_ANSWER)
    if pending:
        responses_unanswered(ck, pending, "the end of input")


def _check_anthropic(
    ck: _Checker, parts: list[_Part], system: str | None, tools: list[ToolDefinition]
) -> None:
    if tools:
        anthropic_tools(render_tools(tools, "anthropic"), ck)
    pending: dict[str, str] = {}
    answered: set[str] = set()
    valid_names = ck.valid_names
    previous_role: str | None = None
    i = 0
    for kind, value in parts:
        if kind == "system":
            continue  # appended to the top-level system text
        role = "user" if kind == "user" else "assistant"
        if kind == "round":
            results = [(c, r) for c, r in value if r is not None]
            messages: list[tuple[str, Any]] = [("assistant", value)]
            if results:
                messages.append(("user", results))
        else:
            messages = [(role, value)]
        for role, content in messages:
            path = f"messages[{i}]"
            if i == 0 and role != "user":
                ck.add("first_not_user", path, "the first message must be a user message")
            if i > 0 and role == previous_role:
                ck.add("role_order", path, f"two {role} messages in a row; roles must alternate")
            previous_role = role
            i += 1
            waiting = pending
            pending = {}
            if isinstance(content, str):
                if not content.strip():
                    ck.add("empty_content", path, "message text is empty")
            elif role == "assistant":  # tool_use blocks
                for j, (c, _) in enumerate(content):
                    bpath = f"{path}.content[{j}]"
                    name = c.function_name
                    if not isinstance(name, str) or not name:
                        ck.add("bad_shape", bpath, "a tool_use block needs a name")
                    elif name not in valid_names:
                        ck.tool_name(name, f"{bpath}.name")
                    arguments = c.arguments if c.arguments is not None else {}
                    if not isinstance(arguments, dict):
                        ck.add(
                            "bad_arguments", f"{bpath}.input", "tool_use input must be an object"
                        )
                    call_id = ck.call_id(c.external_id, bpath, "anthropic")
                    if call_id is not None and call_id not in pending:
                        pending[call_id] = bpath
            else:  # tool_result blocks, alone in their message
                for j, (c, _) in enumerate(content):
                    call_id = c.external_id
                    if type(call_id) is str and call_id and call_id in waiting:
                        del waiting[call_id]
                        answered.add(call_id)
                        continue
                    ck.answer(
                        call_id,
                        f"{path}.content[{j}]",
                        waiting,
                        answered,
                        ("tool_result", "tool_use_id", "tool_use"),
                        "which is not a tool_use in the previous assistant message",
                    )
            anthropic_unanswered(ck, waiting, path)
    if i == 0:
        ck.add("empty_payload", "messages", "there must be at least one message")
        return
    anthropic_unanswered(ck, pending, None)


_CHECKS: dict[str, Callable[[_Checker, list[_Part], str | None, list[ToolDefinition]], None]] = {
    "openai-chat": _check_chat,
    "openai-responses": _check_responses,
    "anthropic": _check_anthropic,
}
