"""Per-format validators: what a provider would reject in a payload, in plain words.

``validate(payload, fmt)`` never raises on malformed input; it returns a list of
:class:`Problem` (empty when the payload is acceptable). Checks, for every format:

* every tool call is answered by exactly one result with the same id, right after it
  (openai-chat: ``tool`` messages directly after the assistant message, all ids answered
  before any other message; openai-responses: a ``function_call_output`` for every
  ``function_call`` before the next message item; anthropic: ``tool_result`` blocks for every
  ``tool_use`` at the start of the very next user message);
* results reference only calls that are waiting for an answer;
* call ids are non-empty and unique across the payload (Chat Completions: at most 40
  characters; Responses: at most 64; Anthropic: ``^[a-zA-Z0-9_-]{1,64}$``, see ``ids.py``);
* tool names, in the definitions and in every call, match ``^[a-zA-Z0-9_-]{1,64}$`` (see
  ``names.py``);
* arguments have the provider's shape (a JSON string encoding an object for OpenAI, an object
  for Anthropic);
* Anthropic roles alternate and start with a user message; no empty text where providers
  reject it; tool names and schemas are acceptable and unique.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import jsonfast
from .diagnostics import Problem
from .ids import ANTHROPIC_ID_RE, MAX_ID_LENGTH
from .names import name_is_valid

JSON = dict[str, Any]


class Memo:
    """What one validation learned that holds for any payload: the argument strings that
    encode a JSON object and the tool names providers accept. A replay's payload and its naive
    payload send the same argument strings, so the second validation does not parse them
    again."""

    __slots__ = ("object_arguments", "valid_names")

    def __init__(self) -> None:
        self.object_arguments: set[str] = set()
        self.valid_names: set[str] = set()


class _Checker:
    def __init__(self, memo: Memo | None = None) -> None:
        self.problems: list[Problem] = []
        self.ids: dict[str, str] = {}  # id -> path of the call that used it first
        memo = memo or Memo()
        # The hot loops test these first and call the checks below only for what is not in
        # them; the checks add what passes.
        self.object_arguments = memo.object_arguments
        self.valid_names = memo.valid_names

    def add(self, code: str, path: str, message: str) -> None:
        self.problems.append(Problem(code=code, message=f"{path}: {message}", path=path))

    def answer(
        self,
        call_id: object,
        path: str,
        waiting: dict[str, str],
        answered: set[str],
        names: tuple[str, str, str],
        unknown: str,
    ) -> None:
        """A result for `call_id`: it must answer a call still waiting for its answer.

        names: what the format calls (the result, its id field, the call), e.g.
        ("tool message", "tool_call_id", "tool call"); unknown: why an unknown id is wrong.
        """
        result, id_field, call = names
        if not isinstance(call_id, str) or not call_id:
            self.add("empty_id", path, f"{result} has no {id_field}")
        elif call_id in waiting:
            del waiting[call_id]
            answered.add(call_id)
        elif call_id in answered:
            self.add("duplicate_result", path, f"{call} '{call_id}' is answered twice")
        else:
            self.add("unknown_result", path, f"{result} answers '{call_id}', {unknown}")

    def call_id(self, call_id: object, path: str, fmt: str) -> str | None:
        if not isinstance(call_id, str) or not call_id:
            self.add("empty_id", path, "tool call has an empty or missing id")
            return None
        if fmt == "anthropic":
            if not ANTHROPIC_ID_RE.fullmatch(call_id):
                self.add(
                    "bad_id",
                    path,
                    f"tool_use id '{call_id}' does not match ^[a-zA-Z0-9_-]{{1,64}}$",
                )
        elif len(call_id) > MAX_ID_LENGTH[fmt]:
            self.add(
                "bad_id",
                path,
                f"tool call id '{call_id}' is longer than {MAX_ID_LENGTH[fmt]} characters",
            )
        first = self.ids.get(call_id)
        if first is not None:
            self.add("duplicate_id", path, f"tool call id '{call_id}' is already used at {first}")
        else:
            self.ids[call_id] = path
        return call_id

    def openai_call(
        self,
        arguments: object,
        arguments_path: str,
        call_id: object,
        path: str,
        fmt: str,
        pending: dict[str, str],
    ) -> None:
        """An OpenAI function call's arguments and id (chat and responses check them alike); an
        id that now waits for its answer goes into `pending`. What is fine (a known arguments
        string, a new acceptable id) is tested inline: this runs once per call."""
        if type(arguments) is not str or arguments not in self.object_arguments:
            self.json_arguments(arguments, arguments_path)
        ids = self.ids
        fine = type(call_id) is str and call_id and len(call_id) <= MAX_ID_LENGTH[fmt]
        if fine and call_id not in ids:
            ids[call_id] = pending[call_id] = path
            return
        call_id = self.call_id(call_id, path, fmt)
        if call_id is not None and call_id not in pending:
            pending[call_id] = path

    def json_arguments(self, arguments: object, path: str) -> None:
        if not isinstance(arguments, str):
            self.add("bad_arguments", path, "arguments must be a JSON string")
            return
        try:
            parsed = jsonfast.loads(arguments)
        except ValueError:
            self.add("bad_arguments", path, "arguments are not valid JSON")
            return
        if not isinstance(parsed, dict):
            self.add("bad_arguments", path, "arguments must encode a JSON object")
        elif type(arguments) is str:
            self.object_arguments.add(arguments)

    def tool_name(self, name: object, path: str) -> bool:
        if name_is_valid(name):
            if type(name) is str:
                self.valid_names.add(name)
            return True
        self.add("bad_tool_name", path, f"tool name {name!r} is not accepted")
        return False

    def tool_names(self, names: list[tuple[object, str]]) -> None:
        seen: set[str] = set()
        for name, path in names:
            if not self.tool_name(name, path):
                continue
            if name in seen:
                self.add("duplicate_tool", path, f"tool '{name}' is defined more than once")
            else:
                seen.add(name)

    def schema(self, schema: object, path: str, required: bool) -> None:
        if schema is None and not required:
            return
        if not isinstance(schema, dict) or schema.get("type") != "object":
            self.add(
                "bad_tool_schema", path, 'the tool schema must be an object with "type": "object"'
            )


def walk_tools(
    tools: object,
    ck: _Checker,
    definition: Callable[[object], tuple[JSON, str] | str],
    schema_key: str,
    schema_required: bool,
    may_be_empty: bool,
) -> None:
    """The ``tools`` of a payload (None: absent), as every format lists them: each tool is
    checked by `definition`, which returns the object holding its name and schema with that
    object's path below the tool (e.g. ``".function"``), or why the tool is malformed; the
    names are checked together, the schema (under `schema_key`) one by one."""
    if tools is None:
        return
    if not isinstance(tools, list) or not (tools or may_be_empty):
        ck.add("bad_shape", "tools", _BAD_TOOLS[may_be_empty])
        return
    names = []
    for i, t in enumerate(tools):
        path = f"tools[{i}]"
        found = definition(t)
        if isinstance(found, str):
            ck.add("bad_shape", path, found)
            continue
        tool, below = found
        names.append((tool.get("name"), f"{path}{below}.name"))
        ck.schema(tool.get(schema_key), f"{path}{below}.{schema_key}", required=schema_required)
    ck.tool_names(names)


_BAD_TOOLS = {
    True: "tools must be a list",
    False: "tools must be a non-empty list when present",
}


def report_unanswered(ck: _Checker, pending: dict[str, str], call: str, why: str) -> None:
    """One ``unanswered_call`` for each call in `pending` (id -> path of the call), in the
    words ``<call> '<id>' <why>``."""
    for call_id, call_path in pending.items():
        ck.add("unanswered_call", call_path, f"{call} '{call_id}' {why}")


# -- openai-chat ------------------------------------------------------------------------------


def chat_tools(tools: object, ck: _Checker) -> None:
    """The ``tools`` of an openai-chat payload (None: absent)."""
    walk_tools(tools, ck, _chat_tool, "parameters", schema_required=False, may_be_empty=False)


def _chat_tool(t: object) -> tuple[JSON, str] | str:
    fn = t.get("function") if isinstance(t, dict) else None
    if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
        return 'a tool must be {"type": "function", "function": {...}}'
    return fn, ".function"


def chat_unanswered(ck: _Checker, pending: dict[str, str], path: str) -> None:
    """The openai-chat calls still waiting for their answer at ``path``; forgets them."""
    report_unanswered(
        ck,
        pending,
        "assistant tool call",
        f"is not followed by a tool message answering it (next: {path})",
    )
    pending.clear()


def _openai_chat(payload: JSON, ck: _Checker) -> None:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        ck.add("empty_payload", "messages", "there must be at least one message")
        return
    chat_tools(payload.get("tools"), ck)

    pending: dict[str, str] = {}  # id -> path of the call, in call order
    answered: set[str] = set()

    # Once per message and per call: paths are made only where they are kept or reported, and
    # what is fine (an answered id, a known name or arguments string) is tested inline.
    valid_names = ck.valid_names
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            ck.add("bad_shape", f"messages[{i}]", "a message must be an object")
            continue
        role = m.get("role")
        if role == "tool":
            if not isinstance(m.get("content"), (str, list)):
                ck.add("bad_shape", f"messages[{i}]", "a tool message needs content")
            call_id = m.get("tool_call_id")
            if type(call_id) is str and call_id in pending:
                del pending[call_id]
                answered.add(call_id)
                continue
            ck.answer(
                call_id,
                f"messages[{i}]",
                pending,
                answered,
                ("tool message", "tool_call_id", "tool call"),
                "but the assistant message right before it did not call a tool with that id "
                "(or it was answered too late)",
            )
            continue
        path = f"messages[{i}]"
        if pending:
            chat_unanswered(ck, pending, path)
        if role == "assistant":
            calls = m.get("tool_calls")
            content = m.get("content")
            if calls is None or calls == []:
                if "tool_calls" in m:
                    ck.add("bad_shape", f"{path}.tool_calls", "tool_calls must not be empty")
                if not isinstance(content, str | list) or content == "":
                    ck.add(
                        "empty_content",
                        path,
                        "assistant message has neither content nor tool calls",
                    )
                continue
            if not isinstance(calls, list):
                ck.add("bad_shape", f"{path}.tool_calls", "tool_calls must be a list")
                continue
            if content is not None and not isinstance(content, str | list):
                ck.add("bad_shape", f"{path}.content", "content must be a string or null")
            for j, call in enumerate(calls):
                cpath = f"{path}.tool_calls[{j}]"
                if not isinstance(call, dict) or call.get("type") != "function":
                    ck.add("bad_shape", cpath, 'a tool call must have "type": "function"')
                    continue
                fn = call.get("function")
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    ck.add("bad_shape", cpath, "a tool call needs a function with a name")
                    continue
                if fn["name"] not in valid_names:
                    ck.tool_name(fn["name"], f"{cpath}.function.name")
                ck.openai_call(
                    fn.get("arguments"),
                    f"{cpath}.function.arguments",
                    call.get("id"),
                    cpath,
                    "openai-chat",
                    pending,
                )
        elif role in ("system", "developer", "user"):
            if not isinstance(m.get("content"), str | list):
                ck.add("bad_shape", path, f"a {role} message needs content")
        else:
            ck.add("bad_shape", path, f"unknown role {role!r}")
    if pending:
        chat_unanswered(ck, pending, "end of messages")


# -- openai-responses -------------------------------------------------------------------------


def responses_tools(tools: object, ck: _Checker) -> None:
    """The ``tools`` of an openai-responses payload (None: absent)."""
    walk_tools(tools, ck, _responses_tool, "parameters", schema_required=True, may_be_empty=False)


def _responses_tool(t: object) -> tuple[JSON, str] | str:
    if not isinstance(t, dict) or t.get("type") != "function":
        return 'a tool must have "type": "function"'
    return t, ""


def responses_unanswered(ck: _Checker, pending: dict[str, str], path: str) -> None:
    """The function_calls still waiting for their output at ``path``; forgets them."""
    report_unanswered(ck, pending, "function_call", f"has no function_call_output before {path}")
    pending.clear()


def _openai_responses(payload: JSON, ck: _Checker) -> None:
    items = payload.get("input")
    if not isinstance(items, list) or not items:
        ck.add("empty_payload", "input", "there must be at least one input item")
        return
    if "instructions" in payload and not isinstance(payload["instructions"], str):
        ck.add("bad_shape", "instructions", "instructions must be a string")
    responses_tools(payload.get("tools"), ck)

    pending: dict[str, str] = {}
    answered: set[str] = set()

    # As in _openai_chat: what is fine is tested inline, paths are made where needed.
    valid_names = ck.valid_names
    for i, item in enumerate(items):
        path = f"input[{i}]"
        if not isinstance(item, dict):
            ck.add("bad_shape", path, "an input item must be an object")
            continue
        kind = item.get("type")
        if kind == "function_call":
            name = item.get("name")
            if not isinstance(name, str) or not name:
                ck.add("bad_shape", path, "a function_call needs a name")
            elif name not in valid_names:
                ck.tool_name(name, f"{path}.name")
            ck.openai_call(
                item.get("arguments"),
                f"{path}.arguments",
                item.get("call_id"),
                path,
                "openai-responses",
                pending,
            )
        elif kind == "function_call_output":
            if not isinstance(item.get("output"), (str, list)):
                ck.add("bad_shape", path, "a function_call_output needs an output")
            call_id = item.get("call_id")
            if type(call_id) is str and call_id in pending:
                del pending[call_id]
                answered.add(call_id)
                continue
            ck.answer(
                call_id,
                path,
                pending,
                answered,
                ("function_call_output", "call_id", "function_call"),
                "but no function_call waiting for an answer has that call_id",
            )
        elif kind in (None, "message"):
            if pending:
                responses_unanswered(ck, pending, path)
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                ck.add("bad_shape", path, f"unknown role {role!r}")
            if not isinstance(item.get("content"), str | list):
                ck.add("bad_shape", path, "a message needs content")
        else:
            ck.add("bad_shape", path, f"unsupported input item type {kind!r}")
    if pending:
        responses_unanswered(ck, pending, "the end of input")


# -- anthropic --------------------------------------------------------------------------------


def anthropic_tools(tools: object, ck: _Checker) -> None:
    """The ``tools`` of an anthropic payload (None: absent)."""
    walk_tools(tools, ck, _anthropic_tool, "input_schema", schema_required=True, may_be_empty=True)


def _anthropic_tool(t: object) -> tuple[JSON, str] | str:
    if not isinstance(t, dict):
        return "a tool must be an object"
    return t, ""


def anthropic_unanswered(ck: _Checker, waiting: dict[str, str], path: str | None) -> None:
    """The tool_use ids of the previous assistant message that the message at ``path`` (None:
    none follows) did not answer."""
    if not waiting:
        return
    if path is None:
        why = "is not answered: no user message with its tool_result follows"
    else:
        why = f"is not answered by a tool_result in the next message ({path})"
    report_unanswered(ck, waiting, "tool_use", why)


def _anthropic(payload: JSON, ck: _Checker) -> None:
    system = payload.get("system")
    if system is not None and not (isinstance(system, str | list)):
        ck.add("bad_shape", "system", "system must be a string or a list of text blocks")
    anthropic_tools(payload.get("tools"), ck)
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        ck.add("empty_payload", "messages", "there must be at least one message")
        return

    pending: dict[str, str] = {}  # tool_use ids of the previous assistant message
    answered: set[str] = set()
    previous_role: object = None
    for i, m in enumerate(messages):
        path = f"messages[{i}]"
        if not isinstance(m, dict):
            ck.add("bad_shape", path, "a message must be an object")
            continue
        role = m.get("role")
        if role not in ("user", "assistant"):
            ck.add("bad_shape", path, f"role must be user or assistant, not {role!r}")
        if i == 0 and role != "user":
            ck.add("first_not_user", path, "the first message must be a user message")
        if i > 0 and role == previous_role:
            ck.add("role_order", path, f"two {role} messages in a row; roles must alternate")
        previous_role = role
        content = m.get("content")
        blocks: list[Any]
        if isinstance(content, str):
            if not content.strip():
                ck.add("empty_content", path, "message text is empty")
            blocks = []
        elif isinstance(content, list):
            if not content:
                ck.add("empty_content", path, "message content is an empty list")
            blocks = content
        else:
            ck.add("bad_shape", path, "content must be a string or a list of blocks")
            blocks = []

        waiting = pending
        pending = {}
        seen_other = False
        for j, block in enumerate(blocks):
            bpath = f"{path}.content[{j}]"
            if not isinstance(block, dict):
                ck.add("bad_shape", bpath, "a content block must be an object")
                continue
            btype = block.get("type")
            if btype == "text":
                seen_other = True
                text = block.get("text")
                if not isinstance(text, str) or not text.strip():
                    ck.add("empty_content", bpath, "text content blocks must be non-empty")
            elif btype == "tool_use":
                seen_other = True
                if role != "assistant":
                    ck.add("bad_shape", bpath, "tool_use blocks belong in assistant messages")
                name = block.get("name")
                if not isinstance(name, str) or not name:
                    ck.add("bad_shape", bpath, "a tool_use block needs a name")
                elif name not in ck.valid_names:
                    ck.tool_name(name, f"{bpath}.name")
                if not isinstance(block.get("input"), dict):
                    ck.add("bad_arguments", f"{bpath}.input", "tool_use input must be an object")
                call_id = ck.call_id(block.get("id"), bpath, "anthropic")
                if call_id is not None and call_id not in pending:
                    pending[call_id] = bpath
            elif btype == "tool_result":
                if role != "user":
                    ck.add("bad_shape", bpath, "tool_result blocks belong in user messages")
                if seen_other:
                    ck.add(
                        "result_not_first",
                        bpath,
                        "tool_result blocks must come before any other content in the message",
                    )
                tool_content = block.get("content")
                if tool_content is not None and not isinstance(tool_content, str | list):
                    ck.add("bad_shape", bpath, "tool_result content must be a string or blocks")
                if "is_error" in block and not isinstance(block["is_error"], bool):
                    ck.add("bad_shape", bpath, "is_error must be a boolean")
                ck.answer(
                    block.get("tool_use_id"),
                    bpath,
                    waiting,
                    answered,
                    ("tool_result", "tool_use_id", "tool_use"),
                    "which is not a tool_use in the previous assistant message",
                )
            else:
                seen_other = True
                if not isinstance(btype, str):
                    ck.add("bad_shape", bpath, "a content block needs a type")
        anthropic_unanswered(ck, waiting, path)
    anthropic_unanswered(ck, pending, None)


_VALIDATORS = {
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
}


def validate(payload: object, fmt: str, memo: Memo | None = None) -> list[Problem]:
    """Problems a provider would reject in ``payload`` (format ``fmt``); empty when fine.
    Validations that share a ``memo`` parse an arguments string and match a tool name once."""
    check = _VALIDATORS.get(fmt)
    if check is None:
        raise ValueError(f"unknown format {fmt!r}")
    ck = _Checker(memo)
    if not isinstance(payload, dict):
        ck.add("bad_shape", "$", "the payload must be a JSON object")
        return ck.problems
    check(payload, ck)
    return ck.problems
