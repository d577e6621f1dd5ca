"""Input dataclasses: the stored history a replay is built from.

Everything here is frozen (and slotted) so a history can be shared between threads and
replayed any number of times with the same result. Collections are tuples. Fields holding
JSON objects (``arguments``, ``parameters``) are plain dicts; they are excluded from hashing so
the dataclasses stay hashable — treat them as read-only, the replay never mutates them.

All datetimes are timezone-aware (UTC). ``ToolCall.response`` is ``None`` when no response was
stored; an empty string *is* a response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
RunStatus = Literal["completed", "failed", "cancelled", "in_progress"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One stored tool invocation and its optional response."""

    row_id: int
    external_id: str
    function_name: str
    arguments: dict[str, Any] | None = field(hash=False)
    round_index: int
    sequence_index: int
    created_at: datetime
    response: str | None = None
    response_created_at: datetime | None = None
    is_error: bool = False
    redacted: bool = False
    # ``jsonfast.dumps(arguments)`` when the loader already made it (it keys the stored token
    # counts by it), so the replay and the naive check do not encode the arguments again; None:
    # they encode them.
    arguments_json: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ServiceCall:
    """One LLM service call (one round) of an assistant run, with its reported usage."""

    round_index: int
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    created_at: datetime | None = None
    # The text the model returned next to this round's tool calls (Claude's "Let me check."),
    # replayed before them.
    content: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """A conversation message. Assistant messages carry their run's tool calls.

    ``imported``: the message came from a provider message list (the import API), that is from
    a request a model was sent. Its run is replayed as it was sent: no freshness window, no
    trailing-result trimming and no source compaction (see ``build.py``).
    """

    row_id: int
    external_id: str
    role: Role
    content: str | None
    created_at: datetime
    status: str | None = None
    model: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    service_calls: tuple[ServiceCall, ...] = ()
    imported: bool = False


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool offered to the model: name, description and JSON schema of its arguments."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True, slots=True)
class History:
    """Everything the replay needs about one conversation."""

    conversation_id: str
    channel: str | None
    system_prompt: str | None
    tool_definitions: tuple[ToolDefinition, ...]
    messages: tuple[Message, ...]

