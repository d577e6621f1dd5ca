"""Request and response models of the JSON API (pydantic v2).

The same classes validate requests (see `webapp.api.endpoint`) and describe them in the OpenAPI
document at `/api/openapi.json`. Response models document the answers; the views build the
answers as plain dicts for speed, and a test checks real answers against these models.

Limits that depend on settings (tools per request, ids per request, result bytes) are checked
by the views, because the settings are read at run time.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
)

from ..db import MAX_INT
from ..models import ROLES, RUN_STATUSES
from ..redaction import DETECTORS

Role = Literal["system", "user", "assistant"]
RunStatus = Literal["completed", "failed", "cancelled", "in_progress"]
RuleKind = Literal["mask", "redact_paths", "skip"]
ImportFormat = Literal["openai-chat", "openai-responses", "anthropic"]
assert set(Role.__args__) == set(ROLES) and set(RunStatus.__args__) == set(RUN_STATUSES)


def _as_utc(value: datetime) -> datetime:
    """Naive timestamps are taken as UTC; aware ones are converted to UTC."""
    try:
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("timestamp is out of range") from exc


def _no_nul(value: str) -> str:
    # PostgreSQL cannot store NUL in text; refusing it in names and ids keeps both databases alike.
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


def _json_storable(value: Any) -> Any:
    """A JSON value both databases can store: no NaN/Infinity, no NUL characters."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError as exc:
        raise ValueError("must not contain NaN or Infinity (not valid JSON)") from exc
    if "\\u0000" in text:
        raise ValueError("must not contain a NUL character")
    return value


_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?")


def _iso_text(value: Any) -> Any:
    # pydantic reads 39 or "39" as 39 seconds after 1970; a timestamp here is ISO 8601 text.
    number = isinstance(value, int | float) or (
        isinstance(value, str) and _NUMBER.fullmatch(value.strip())
    )
    if number:
        raise ValueError("must be an ISO 8601 time such as 2026-03-10T09:30:00Z")
    return value


def _whole_number(value: Any) -> Any:
    # JSON Schema's "integer" is any number with a zero fraction: 39916800.0 is one (a
    # client's JSON encoder may write it so). Strict pydantic refuses it; it is taken as 39916800.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# PostgreSQL cannot store or compare text with NUL in it: `endpoint` refuses NUL in every URL
# value, `_no_nul` in names and ids. The document says so with this pattern (the server's
# messages stay its own).
NO_NUL = "^[^\\x00]*$"
NUL_FREE = {"pattern": NO_NUL}
# What `queries.cursors.encode` writes (URL-safe base64 without padding). A cursor of that shape
# the API did not return names no page: 404 (`endpoint.cursor_error`).
CURSOR = re.compile(r"[A-Za-z0-9_-]*")
CURSOR_SCHEMA = {
    "pattern": f"^{CURSOR.pattern}$",
    "description": "`next_cursor` of the previous page. A cursor this API did not return (or "
    "returned for another sort) names no page: 404.",
}


def unless(field: str, values: tuple[str, ...], then: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema for "the object matches `then` unless `field` (required, an enum) is one of
    `values`": `if`/`then` written as `anyOf`, a form schemathesis's coverage phase follows (it
    widens `if`/`then` and sends what the server refuses) and so do more client generators."""
    return {"anyOf": [{"properties": {field: {"enum": list(values)}}}, then]}


# Lax (text becomes a datetime after the check above) inside the strict request models.
Timestamp = Annotated[datetime, Strict(False), BeforeValidator(_iso_text), AfterValidator(_as_utc)]
# An external id or name as stored in a String(255) column.
_NO_NUL_FIELD = Field(json_schema_extra=NUL_FREE)
Ident = Annotated[str, StringConstraints(max_length=255), AfterValidator(_no_nul), _NO_NUL_FIELD]
NonEmptyIdent = Annotated[
    str, StringConstraints(min_length=1, max_length=255), AfterValidator(_no_nul), _NO_NUL_FIELD
]
ShortName = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(_no_nul), _NO_NUL_FIELD
]
Index = Annotated[int, Field(ge=0, le=MAX_INT), BeforeValidator(_whole_number)]
TokenNumber = Annotated[int, Field(ge=0, le=MAX_INT), BeforeValidator(_whole_number)]
JsonObject = Annotated[dict[str, Any], AfterValidator(_json_storable)]


class _In(BaseModel):
    """Native request bodies refuse unknown fields: a typo must not silently drop data. Types
    are strict: `true` or `"3"` is not an index."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _Out(BaseModel):
    """Answers list every field they have; `extra="forbid"` lets a test prove it."""

    model_config = ConfigDict(extra="forbid")


class _SdkIn(BaseModel):
    """MessageTool bodies ignore unknown fields, so newer SDK versions keep working. Types are
    strict, as in native bodies."""

    model_config = ConfigDict(extra="ignore", strict=True)


# --- MessageTool-compatible (camelCase, as `unique_sdk.MessageTool` sends it) -------------------


class ToolResponseIn(_SdkIn):
    content: str | None = None


class ToolItem(_SdkIn):
    externalToolCallId: Ident
    functionName: NonEmptyIdent
    arguments: dict[str, Any] | None = None
    roundIndex: Index
    sequenceIndex: Index
    response: ToolResponseIn | None = None


class MessageToolsCreate(_SdkIn):
    """`POST /messages/tools`: at most MAX_TOOLS_PER_REQUEST tools (50 by default)."""

    messageId: NonEmptyIdent
    tools: list[ToolItem]


class MessageToolsQuery(BaseModel):
    messageIds: str = Field(
        description="Comma-separated message ids, at most MAX_IDS_PER_REQUEST (200 by default).",
        json_schema_extra=NUL_FREE,
    )


class MessageToolResponseOut(_Out):
    id: str
    content: str | None
    toolCallId: str
    createdAt: str | None


class MessageToolOut(_Out):
    id: str
    object: Literal["messageTool"]
    externalToolCallId: str
    functionName: str
    arguments: dict[str, Any] | None
    roundIndex: int
    sequenceIndex: int
    messageId: str
    response: MessageToolResponseOut | None
    createdAt: str


class MessageToolList(_Out):
    object: Literal["list"]
    data: list[MessageToolOut]
    has_more: bool


# --- Native API (snake_case) ---------------------------------------------------------------------


class ToolResultIn(_In):
    content: str | None = None
    created_at: Timestamp | None = None
    is_error: bool = False


class _CallFields(_In):
    id: Ident = Field(description="The LLM's tool_call id; an empty string is allowed.")
    name: NonEmptyIdent
    arguments: dict[str, Any] | None = None
    created_at: Timestamp | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    response: ToolResultIn | None = None


class ToolCallIn(_CallFields):
    round_index: Index
    sequence_index: Index


class RoundCallIn(_CallFields):
    """A call inside a round: the round gives round_index; sequence_index defaults to position."""

    sequence_index: Index | None = None


ModelName = Annotated[
    str, StringConstraints(max_length=200), AfterValidator(_no_nul), _NO_NUL_FIELD
]


class _UsageFields(_In):
    model: ModelName | None = None
    provider: (
        Annotated[str, StringConstraints(max_length=64), AfterValidator(_no_nul), _NO_NUL_FIELD]
        | None
    ) = None
    input_tokens: TokenNumber | None = None
    output_tokens: TokenNumber | None = None
    cached_tokens: TokenNumber | None = Field(
        default=None,
        description="Part of `input_tokens`, as OpenAI counts them. More than `input_tokens` "
        "(counted apart, as Anthropic does) is stored as sent, without a cost.",
    )
    created_at: Timestamp | None = None
    started_at: Timestamp | None = Field(
        default=None, description="When the agent sent this LLM service call."
    )
    ended_at: Timestamp | None = Field(
        default=None,
        description="When the service call's answer was complete; with `started_at`, the "
        "round's model latency (drawn in the run's waterfall).",
    )
    content: str | None = Field(
        default=None,
        description="What the model said in this service call: the text it returned alongside "
        "(or instead of) its tool calls. Optional; shown with the round in the dashboard.",
    )
    reasoning: str | None = Field(
        default=None,
        description="The model's reasoning for this service call, when the provider returns "
        "it (a reasoning summary, Anthropic thinking). Optional; shown folded with the round.",
    )


class UsageIn(_UsageFields):
    round_index: Index


class RoundUsageIn(_UsageFields):
    """Usage of one round; the round gives round_index."""


_NONE_OR_EMPTY = {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}


class MessageIn(_In):
    # Only assistant messages have tool calls, a run status or usage (`drafts.message`).
    model_config = ConfigDict(
        json_schema_extra=unless(
            "role",
            ("assistant",),
            {
                "properties": {
                    "status": {"type": "null"},
                    "tool_calls": _NONE_OR_EMPTY,
                    "usage": _NONE_OR_EMPTY,
                }
            },
        )
    )

    id: NonEmptyIdent
    role: Role
    content: str | None = None
    created_at: Timestamp | None = None
    status: RunStatus | None = Field(
        default=None, description="Assistant messages only; default `completed`."
    )
    model: ModelName | None = None
    usage: list[UsageIn] | None = None
    tool_calls: list[ToolCallIn] | None = Field(default=None, description="Assistant only.")


class MessagesCreate(_In):
    messages: list[MessageIn]


class TurnUserIn(_In):
    id: NonEmptyIdent
    role: Literal["user", "system"] = "user"
    content: str | None = None
    created_at: Timestamp | None = None


class RoundIn(_In):
    usage: RoundUsageIn | None = None
    calls: list[RoundCallIn] = Field(default_factory=list)


class TurnAssistantIn(_In):
    id: NonEmptyIdent
    # Optional, so a contract Message (which carries its role) can be sent as it is.
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    created_at: Timestamp | None = None
    status: RunStatus | None = None
    model: ModelName | None = None
    usage: list[UsageIn] | None = None
    rounds: list[RoundIn] = Field(default_factory=list)


class TurnCreate(_In):
    user: TurnUserIn | None = None
    assistant: TurnAssistantIn


class RoundCreate(_In):
    calls: list[RoundCallIn] = Field(default_factory=list)
    usage: RoundUsageIn | None = None
    status: RunStatus | None = None
    content: str | None = Field(
        default=None,
        description="The run's final answer (the assistant message's content), usually sent "
        "with the `status` that ends the run; may be given while the run is `in_progress`.",
    )


class ToolDefinitionIn(_In):
    name: NonEmptyIdent
    description: str | None = None
    parameters: JsonObject | None = Field(default=None, description="JSON schema of arguments.")


class ConversationPut(_In):
    title: str | None = None
    channel: ShortName | None = None
    metadata: JsonObject | None = None
    system_prompt: str | None = None
    tools: list[ToolDefinitionIn] | None = None
    created_at: Timestamp | None = None


class ConversationListQuery(BaseModel):
    channel: str | None = Field(default=None, json_schema_extra=NUL_FREE)
    q: str | None = Field(
        default=None, description="Search in id and title.", json_schema_extra=NUL_FREE
    )
    range: Literal["1h", "24h", "7d", "30d"] | None = Field(
        default=None,
        description="Conversations active in the last hour, 24 hours, 7 or 30 days.",
    )
    limit: int = Field(default=50, ge=1, le=200)
    cursor: str | None = Field(default=None, json_schema_extra=CURSOR_SCHEMA)


def _import_needs(fmt: str, key: str) -> dict[str, Any]:
    others = tuple(f for f in ImportFormat.__args__ if f != fmt)
    given: dict[str, Any] = {"type": "array"}
    if key == "input":
        given = {"anyOf": [given, {"type": "string"}]}
    return unless("format", others, {"required": [key], "properties": {key: given}})


class ImportCreate(BaseModel):
    """A provider message list. Unknown top-level keys (model, max_tokens...) are ignored, so a
    request body or a replay export's `payload` can be posted as it is (plus `format`)."""

    # openai-responses reads `input`, the others `messages` (`importers.import_conversation`).
    model_config = ConfigDict(
        extra="ignore",
        strict=True,
        json_schema_extra={
            "allOf": [
                _import_needs("openai-chat", "messages"),
                _import_needs("openai-responses", "input"),
                _import_needs("anthropic", "messages"),
            ]
        },
    )

    format: ImportFormat
    messages: list[dict[str, Any]] | None = None
    input: list[dict[str, Any]] | str | None = Field(
        default=None, description="openai-responses: the `input` items."
    )
    system: str | list[dict[str, Any]] | None = None
    instructions: str | None = Field(default=None, description="openai-responses system prompt.")
    tools: list[dict[str, Any]] | None = None
    started_at: Timestamp | None = None


class ChannelPut(_In):
    freshness_seconds: (
        Annotated[int, Field(ge=0, le=MAX_INT), BeforeValidator(_whole_number)] | None
    ) = None


def _rule_value(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    others = tuple(k for k in RuleKind.__args__ if k != kind)
    value = {"type": "array", "minItems": 1, "items": item}
    return unless("kind", others, {"required": ["value"], "properties": {"value": value}})


class RedactionRuleCreate(_In):
    # What `redaction.validate_rule` asks of `value`, by kind.
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _rule_value("mask", {"enum": list(DETECTORS)}),
                # Dotted names, none empty, no NUL.
                _rule_value("redact_paths", {"pattern": "^[^.\\x00]+(\\.[^.\\x00]+)*$"}),
            ]
        }
    )

    name: ShortName
    function_name: NonEmptyIdent | None = Field(
        default=None, description="A tool name or glob such as `search_*`; null = every tool."
    )
    kind: RuleKind
    value: list[str] = Field(
        default_factory=list,
        description="mask: detectors (api_key, bearer, email, card); redact_paths: dotted "
        "paths with `*` wildcards; skip: unused.",
    )
    enabled: bool = True


# --- Path parameters -------------------------------------------------------------------------


class ConversationPath(BaseModel):
    cid: str = Field(json_schema_extra=NUL_FREE)


class RoundPath(BaseModel):
    cid: str = Field(json_schema_extra=NUL_FREE)
    mid: str = Field(json_schema_extra=NUL_FREE)
    round_index: Index


class ChannelPath(BaseModel):
    # Checked by the view (`channel_put`), which names the parameter in its 422.
    name: str = Field(json_schema_extra={"minLength": 1, "maxLength": 200, **NUL_FREE})


class RulePath(BaseModel):
    rule_id: Annotated[int, Field(ge=1, le=MAX_INT)]


# --- Native responses ------------------------------------------------------------------------


class ToolResultOut(_Out):
    content: str | None
    created_at: str | None
    is_error: bool


class ToolCallOut(_Out):
    id: str
    name: str
    arguments: dict[str, Any] | None
    round_index: int
    sequence_index: int
    created_at: str
    started_at: str | None
    ended_at: str | None
    response: ToolResultOut | None
    redacted: list[str] | None
    arguments_tokens: int | None
    response_tokens: int | None
    response_bytes: int | None
    token_method: str | None
    duration_ms: float | None


class UsageOut(_Out):
    round_index: int
    model: str | None
    provider: str | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    created_at: str | None
    cost_usd: str | None
    price_source: str | None


class MessageOut(_Out):
    id: str
    object: Literal["message"]
    conversation_id: str | None
    role: str
    content: str | None
    created_at: str
    status: str | None
    model: str | None
    content_tokens: int | None
    usage: list[UsageOut]
    tool_calls: list[ToolCallOut]


class MessageList(_Out):
    object: Literal["list"]
    data: list[MessageOut]
    has_more: bool


class TurnOut(_Out):
    object: Literal["turn"]
    user: MessageOut | None
    assistant: MessageOut


class ToolDefinitionOut(_Out):
    name: str
    description: str | None
    parameters: dict[str, Any] | None


class ConversationSummary(_Out):
    id: str
    object: Literal["conversation"]
    title: str
    channel: str | None
    metadata: dict[str, Any]
    created_at: str
    updated_at: str
    message_count: int
    tool_call_count: int


class ConversationList(_Out):
    object: Literal["list"]
    data: list[ConversationSummary]
    has_more: bool
    next_cursor: str | None


class ConversationOut(_Out):
    id: str
    object: Literal["conversation"]
    title: str
    channel: str | None
    metadata: dict[str, Any]
    system_prompt: str | None
    tools: list[ToolDefinitionOut]
    created_at: str
    updated_at: str


class ConversationDetail(ConversationOut):
    messages: list[MessageOut]


class ChannelOut(_Out):
    name: str
    object: Literal["channel"]
    freshness_seconds: int | None
    created_at: str


class ChannelList(_Out):
    object: Literal["list"]
    data: list[ChannelOut]
    has_more: bool


class RedactionRuleOut(_Out):
    id: int
    object: Literal["redaction_rule"]
    name: str
    function_name: str | None
    kind: str
    value: list[str]
    enabled: bool
    created_at: str


class RedactionRuleList(_Out):
    object: Literal["list"]
    data: list[RedactionRuleOut]
    has_more: bool


class ErrorObject(_Out):
    message: str = Field(description="What went wrong, in a sentence.")
    type: str = Field(description="`invalid_request_error`, `authentication_error`, ...")
    code: str = Field(description="Ours, short: `invalid`, `conflict`, `busy`, ...")
    param: str | None = Field(description="The request field at fault, if one is.")
    details: list[dict[str, Any]] | None = Field(
        default=None, description="Every field at fault, with its limit where one applies."
    )


class ErrorOut(_Out):
    """Every error (docs/api.md#errors), in the shape of OpenAI's error object."""

    error: ErrorObject


def error_responses(*statuses: int) -> dict[int, type[ErrorOut]]:
    """OpenAPI `responses` for these error statuses."""
    return dict.fromkeys(statuses, ErrorOut)


# Any request may be refused for its key, or by gunicorn for an over-long URL.
ANY_REQUEST_ERRORS = (401, 414)
# A request with a JSON body: malformed (400), too slow (408), too large (413), invalid (422),
# in conflict with what is stored (409), or losing a write race twice (503, retry).
WRITE_ERRORS = error_responses(400, 408, 409, 413, 422, 503)
# The MessageTool endpoints answer every request error as 400 (see webapp.errors).
UNIQUE_API_WRITE_ERRORS = error_responses(400, 408, 503)
