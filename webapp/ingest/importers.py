"""Provider message lists → Toolscope turns with rounds. Pure: no Flask, no database.

Supported formats (the same three the replay exports, so an export imports back):

- `openai-chat`: `messages` with `system`/`developer`, `user`, `assistant` (`tool_calls`) and
  `tool` (`tool_call_id`) roles; content as a string or a list of text parts.
- `openai-responses`: `input` items: messages (`role` + `content`), `function_call` and
  `function_call_output`; `instructions` is the system prompt. Other item types (reasoning...)
  are skipped.
- `anthropic`: `messages` whose assistant content holds `tool_use` blocks and whose user content
  holds `tool_result` blocks; `system` at the top level.

How turns are derived: every assistant message that requests tools is one round (its calls, in
order, are the sequence); consecutive rounds between two user messages belong to one assistant
turn, whose final text is the next assistant text. Results attach to calls by id.

Nothing the model was sent is dropped, and the list is stored so that its replay gives it back
(the conversation's messages are marked imported, see `webapp.replay.build`):

- Text next to tool calls in one assistant message ("Let me check...", or a replay export's
  Anthropic message that carries one run's answer and the next run's `tool_use`) is kept, in
  block order: it closes the turn still collecting rounds as its final text, or is an assistant
  message of its own; the tool calls after it start a new turn.
- Anthropic content blocks are kept one stored message per text block: the replay merges
  consecutive messages of one role into one message of blocks, so the same blocks come back.
  (OpenAI text parts are joined by a blank line into one message.)
- A leading system message becomes the system prompt unless one is given (openai-chat and
  anthropic, which send the system prompt that way). In openai-responses `instructions` is the
  system prompt and a system item in `input` stays an item.

Message ids are `<id_prefix>-<n>` (n = position among the stored messages), so importing the
same list twice stores it once, unless a provider message carries a string `id` of its own (its
first stored message takes it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..replay import jsonfast

FORMATS = ("openai-chat", "openai-responses", "anthropic")
MAX_ID_LENGTH = 255


class ImportFormatError(ValueError):
    """The message list cannot be read; `field` is the path of the offending item."""

    def __init__(self, field_path: str, message: str):
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.message = message


@dataclass
class ImportedCall:
    id: str
    name: str
    arguments: dict[str, Any] | None
    round_index: int
    sequence_index: int
    field: str
    response: str | None = None
    is_error: bool = False


@dataclass
class ImportedMessage:
    id: str
    role: str
    content: str | None
    field: str
    tool_calls: list[ImportedCall] = field(default_factory=list)

    @property
    def round_count(self) -> int:
        return self.tool_calls[-1].round_index + 1 if self.tool_calls else 0


@dataclass
class ImportedConversation:
    system_prompt: str | None
    tools: list[dict[str, Any]]
    messages: list[ImportedMessage]


# --- Small readers -----------------------------------------------------------------------------


def _obj(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ImportFormatError(path, "expected an object")
    return value


def _list(value: Any, path: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise ImportFormatError(path, "expected a list")
    return value


def _ident(value: Any, path: str, *, allow_empty: bool) -> str:
    if value is None and allow_empty:
        return ""
    if not isinstance(value, str):
        raise ImportFormatError(path, "expected a string")
    if not value and not allow_empty:
        raise ImportFormatError(path, "must not be empty")
    if len(value) > MAX_ID_LENGTH or "\x00" in value:
        raise ImportFormatError(path, f"must be at most {MAX_ID_LENGTH} characters, without NUL")
    return value


TEXT_PART_TYPES = ("text", "input_text", "output_text")


def _text(content: Any, path: str) -> str | None:
    """A message's text: a string, or the text parts of a list joined by blank lines."""
    if content is None or isinstance(content, str):
        return content
    parts = []
    for i, part in enumerate(_list(content, path)):
        if isinstance(part, str):
            parts.append(part)
            continue
        part = _obj(part, f"{path}.{i}")
        if part.get("type") in TEXT_PART_TYPES and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "\n\n".join(parts) if parts else None


def _arguments_from_json(raw: Any, path: str) -> dict[str, Any] | None:
    """OpenAI sends arguments as JSON text. Text that is not a JSON object (a model can emit
    truncated JSON) is kept as `{"_raw": text}` rather than refused."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, str):
        raise ImportFormatError(path, "expected arguments as a JSON string")
    try:
        parsed = jsonfast.loads(raw, allow_nan=False)
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}


def _given_id(message: Mapping[str, Any]) -> str | None:
    value = message.get("id")
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and "\x00" not in value:
        return value
    return None


# --- The turn builder (shared by every format) ------------------------------------------------


class _TurnBuilder:
    def __init__(self, id_prefix: str, system_prompt: str | None, *, promote_system: bool):
        self.id_prefix = id_prefix
        self.system_prompt = system_prompt
        # Whether a leading system message is the system prompt (see the module docstring).
        self.promote_system = promote_system
        self.messages: list[ImportedMessage] = []
        self.turn: ImportedMessage | None = None  # assistant turn still collecting rounds
        self.calls_by_id: dict[str, ImportedCall] = {}
        self.given: str | None = None  # the id of the provider message being read, until used

    def message(self, given: str | None) -> None:
        """A new provider message starts; ``given`` is its own id, if it has one."""
        self.given = given

    def _new(self, role: str, content: str | None, path: str) -> ImportedMessage:
        message = ImportedMessage(
            id=self.given or f"{self.id_prefix}-{len(self.messages)}",
            role=role,
            content=content,
            field=path,
        )
        self.given = None  # a provider message split in several: its id goes to the first
        self.messages.append(message)
        return message

    def text(self, role: str, content: str | None, path: str) -> None:
        if (
            role == "system"
            and self.promote_system
            and not self.messages
            and self.system_prompt is None
        ):
            self.system_prompt = content or ""
            return
        if role == "assistant" and self.turn is not None:
            self.turn.content = content  # the turn's final text closes it
            self.turn = None
            return
        self.turn = None
        if role == "user" and not content:
            return
        self._new(role, content, path)

    def round(self, calls: list[tuple[str, str, dict[str, Any] | None, str]], path: str) -> None:
        if not calls:
            return
        if self.turn is None:
            self.turn = self._new("assistant", None, path)
        round_index = self.turn.round_count
        for sequence_index, (call_id, name, arguments, call_path) in enumerate(calls):
            call = ImportedCall(call_id, name, arguments, round_index, sequence_index, call_path)
            if call_id:
                if call_id in self.calls_by_id:
                    raise ImportFormatError(call_path, f"tool call id {call_id!r} is used twice")
                self.calls_by_id[call_id] = call
            self.turn.tool_calls.append(call)

    def result(self, call_id: str, content: str, is_error: bool, path: str) -> None:
        call = self.calls_by_id.get(call_id)
        if call is None:
            raise ImportFormatError(path, f"no tool call with id {call_id!r} before this result")
        if call.response is not None:
            raise ImportFormatError(path, f"tool call {call_id!r} already has a result")
        call.response = content
        call.is_error = is_error

    def build(self, tools: list[dict[str, Any]]) -> ImportedConversation:
        return ImportedConversation(self.system_prompt, tools, self.messages)


# --- Formats -----------------------------------------------------------------------------------


def _has_text(text: str | None) -> bool:
    return text is not None and text.strip() != ""


def _openai_chat(messages: Sequence[Any], b: _TurnBuilder) -> None:
    for i, raw in enumerate(messages):
        path = f"messages.{i}"
        m = _obj(raw, path)
        b.message(_given_id(m))
        role = m.get("role")
        if role in ("system", "developer"):
            b.text("system", _text(m.get("content"), f"{path}.content"), path)
        elif role == "user":
            b.text("user", _text(m.get("content"), f"{path}.content"), path)
        elif role == "assistant":
            content = _text(m.get("content"), f"{path}.content")
            tool_calls = m.get("tool_calls") or []
            if tool_calls:
                if _has_text(content):  # said before the calls: kept, in that order
                    b.text("assistant", content, path)
                b.round(_openai_chat_calls(tool_calls, f"{path}.tool_calls"), path)
            else:
                b.text("assistant", content, path)
        elif role == "tool":
            call_id = _ident(m.get("tool_call_id"), f"{path}.tool_call_id", allow_empty=False)
            b.result(call_id, _text(m.get("content"), f"{path}.content") or "", False, path)
        else:
            raise ImportFormatError(
                f"{path}.role",
                f"unsupported role {role!r}; expected system, developer, user, assistant or tool",
            )


def _openai_chat_calls(tool_calls: Any, path: str) -> list[tuple[str, str, Any, str]]:
    calls = []
    for j, raw in enumerate(_list(tool_calls, path)):
        call_path = f"{path}.{j}"
        call = _obj(raw, call_path)
        function = _obj(call.get("function"), f"{call_path}.function")
        calls.append(
            (
                _ident(call.get("id"), f"{call_path}.id", allow_empty=True),
                _ident(function.get("name"), f"{call_path}.function.name", allow_empty=False),
                _arguments_from_json(function.get("arguments"), f"{call_path}.function.arguments"),
                call_path,
            )
        )
    return calls


def _openai_responses(items: Sequence[Any] | str, b: _TurnBuilder) -> None:
    if isinstance(items, str):
        b.message(None)
        b.text("user", items, "input")
        return
    pending: list[tuple[str, str, Any, str]] = []
    pending_path = ""

    def flush() -> None:
        nonlocal pending
        if pending:
            b.message(None)
            b.round(pending, pending_path)
            pending = []

    for i, raw in enumerate(items):
        path = f"input.{i}"
        item = _obj(raw, path)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "function_call":
            if not pending:
                pending_path = path
            pending.append(
                (
                    _ident(item.get("call_id"), f"{path}.call_id", allow_empty=True),
                    _ident(item.get("name"), f"{path}.name", allow_empty=False),
                    _arguments_from_json(item.get("arguments"), f"{path}.arguments"),
                    path,
                )
            )
            continue
        if kind == "reasoning":
            continue  # reasoning between parallel calls does not end the round
        flush()
        if kind == "function_call_output":
            call_id = _ident(item.get("call_id"), f"{path}.call_id", allow_empty=False)
            b.result(call_id, _text(item.get("output"), f"{path}.output") or "", False, path)
        elif kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise ImportFormatError(f"{path}.role", f"unsupported role {role!r}")
            role = "system" if role == "developer" else role
            b.message(_given_id(item))
            b.text(role, _text(item.get("content"), f"{path}.content"), path)
    flush()


def _anthropic(messages: Sequence[Any], b: _TurnBuilder) -> None:
    for i, raw in enumerate(messages):
        path = f"messages.{i}"
        m = _obj(raw, path)
        b.message(_given_id(m))
        role = m.get("role")
        content = m.get("content")
        if role not in ("user", "assistant"):
            raise ImportFormatError(
                f"{path}.role", f"unsupported role {role!r}; expected user or assistant"
            )
        if content is None or isinstance(content, str):
            b.text(role, content, path)
            continue
        blocks = [
            _obj(block, f"{path}.content.{j}")
            for j, block in enumerate(_list(content, f"{path}.content"))
        ]
        if role == "assistant":
            _anthropic_assistant(blocks, path, b)
        else:
            _anthropic_user(blocks, path, b)


def _block_text(block: Mapping[str, Any]) -> str | None:
    text = block.get("text")
    return text if block.get("type") == "text" and isinstance(text, str) else None


def _anthropic_assistant(blocks: list[Mapping[str, Any]], path: str, b: _TurnBuilder) -> None:
    """In block order: each text block is assistant text, consecutive tool_use blocks a round."""
    calls: list[tuple[str, str, dict[str, Any] | None, str]] = []
    texts = 0
    for j, block in enumerate(blocks):
        block_path = f"{path}.content.{j}"
        text = _block_text(block)
        if text is not None:
            b.round(calls, path)
            calls = []
            b.text("assistant", text, path)
            texts += 1
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            if arguments is not None and not isinstance(arguments, dict):
                raise ImportFormatError(f"{block_path}.input", "expected an object")
            calls.append(
                (
                    _ident(block.get("id"), f"{block_path}.id", allow_empty=True),
                    _ident(block.get("name"), f"{block_path}.name", allow_empty=False),
                    arguments,
                    block_path,
                )
            )
    b.round(calls, path)
    if not texts and not any(block.get("type") == "tool_use" for block in blocks):
        b.text("assistant", None, path)  # no text and no calls (only thinking, or nothing)


def _anthropic_user(blocks: list[Mapping[str, Any]], path: str, b: _TurnBuilder) -> None:
    """Results attach to their calls; each text block is a user message of its own."""
    for j, block in enumerate(blocks):
        block_path = f"{path}.content.{j}"
        if block.get("type") == "tool_result":
            call_id = _ident(
                block.get("tool_use_id"), f"{block_path}.tool_use_id", allow_empty=False
            )
            result = _text(block.get("content"), f"{block_path}.content") or ""
            b.result(call_id, result, bool(block.get("is_error")), block_path)
            continue
        text = _block_text(block)
        if text is not None:
            b.text("user", text, path)


# --- Tools -------------------------------------------------------------------------------------


def _tool(raw: Any, path: str) -> dict[str, Any] | None:
    """A tool definition in any of the formats' shapes → {name, description, parameters};
    None for built-in tools (web search...) that have no function schema."""
    tool = _obj(raw, path)
    if isinstance(tool.get("function"), Mapping):  # OpenAI chat
        tool = tool["function"]
        path = f"{path}.function"
    elif tool.get("type") not in (None, "function", "custom"):
        return None
    name = _ident(tool.get("name"), f"{path}.name", allow_empty=False)
    schema = tool.get("parameters", tool.get("input_schema"))
    if schema is not None and not isinstance(schema, dict):
        raise ImportFormatError(f"{path}.parameters", "expected a JSON schema object")
    description = tool.get("description")
    return {
        "name": name,
        "description": description if isinstance(description, str) else None,
        "parameters": schema,
    }


# What the Responses and Anthropic formats send for a tool stored without a schema (they always
# send one); read back as "no schema", so a copy is what the export was made from.
_NO_SCHEMA = {"type": "object", "properties": {}}


def _tools(tools: Sequence[Any] | None, fmt: str) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(tools or []):
        tool = _tool(raw, f"tools.{i}")
        if tool is None:
            continue
        if fmt != "openai-chat" and tool["parameters"] == _NO_SCHEMA:
            tool["parameters"] = None
        out[tool["name"]] = tool  # one definition per name, the last one wins
    return list(out.values())


# --- Entry point -------------------------------------------------------------------------------


def import_conversation(
    fmt: str,
    *,
    messages: Sequence[Any] | str | None,
    system: str | Sequence[Any] | None = None,
    tools: Sequence[Any] | None = None,
    id_prefix: str,
) -> ImportedConversation:
    """Read a provider message list (`input` for openai-responses) into turns with rounds."""
    if fmt not in FORMATS:
        raise ImportFormatError("format", f"unknown format {fmt!r}; expected {', '.join(FORMATS)}")
    key = "input" if fmt == "openai-responses" else "messages"
    if messages is None:
        raise ImportFormatError(key, f"the {fmt} format needs `{key}`")
    system_prompt = _text(system, "system") if system is not None else None
    builder = _TurnBuilder(id_prefix, system_prompt, promote_system=fmt != "openai-responses")
    if fmt == "openai-chat":
        _openai_chat(_list(messages, key), builder)
    elif fmt == "openai-responses":
        _openai_responses(messages if isinstance(messages, str) else _list(messages, key), builder)
    else:
        _anthropic(_list(messages, key), builder)
    return builder.build(_tools(tools, fmt))
