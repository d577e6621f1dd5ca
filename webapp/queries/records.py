"""Plain records returned by the read queries: data only, no session, no lazy loading."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: int
    external_id: str
    title: str
    channel: str | None
    meta: dict[str, Any]
    system_prompt: str | None
    created_at: datetime
    updated_at: datetime
    # Replay freshness window resolved channel → project (None: no window).
    freshness_seconds: int | None


@dataclass(frozen=True, slots=True)
class ConversationStats:
    """Aggregates of one conversation (list columns and the page header)."""

    messages: int = 0
    turns: int = 0
    failed_runs: int = 0
    calls: int = 0
    errors: int = 0
    missing_responses: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: Decimal | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class MessageRecord:
    id: int
    external_id: str
    role: str
    content: str | None
    created_at: datetime
    status: str | None
    model: str | None
    content_tokens: int | None
    imported: bool = False  # stored by the import API


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A tool call as the timeline shows it. ``list_response`` holds the response text only
    when it starts like a JSON list (what source compaction looks at); other responses are
    left in the database so a page of cards stays light."""

    id: int
    message_id: int
    round_index: int
    sequence_index: int
    external_tool_call_id: str
    function_name: str
    arguments: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    has_response: bool
    response_created_at: datetime | None
    is_error: bool
    redactions: tuple[str, ...]
    arguments_tokens: int | None
    response_tokens: int | None
    response_bytes: int | None
    # Not part of the JSON twins: it can be large, and the call detail has the response.
    list_response: str | None = field(default=None, metadata={"json": False})


@dataclass(frozen=True, slots=True)
class MessageCallSummary:
    """Per assistant message: how many calls, the last call's key (for paging), problems."""

    calls: int
    errors: int
    missing: int
    rounds: int


@dataclass(frozen=True, slots=True)
class ServiceCallRecord:
    message_id: int
    round_index: int
    model: str | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    cost_usd: Decimal | None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    content: str | None = None
    reasoning: str | None = None
    # When the usage was reported (the service call's answer, when the agent sends no times).
    created_at: datetime | None = None
    # The round's tool calls and the tokens of their arguments, all of them (a view may show
    # some only): what each call's share of the round's cost is taken of.
    round_calls: int | None = None
    round_arguments_tokens: int | None = None

    @property
    def latency_ms(self) -> float | None:
        """The service call's latency, when the agent sent its start and end."""
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, (self.ended_at - self.started_at).total_seconds() * 1000)
