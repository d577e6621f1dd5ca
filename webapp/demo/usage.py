"""The demo's reported usage, consistent with the context each service call sends.

The demo's agent builds each run's context from Toolscope's replay (per-run persistence, the
channel's freshness window, source compaction: what the conversation's context chart counts)
plus the run's own rounds so far. So each service call reports as input the tokens of that
context, counted with the model's tokenizer as the app counts them (``webapp.tokens``), plus the
framing a provider adds (roles, separators, the tool schema's wrapping: a few percent and a few
tokens, seeded per call). Within a run, and from one run to the next a few minutes later, an
OpenAI model reads the part of the prompt it has already seen from its prompt cache (whole
128-token blocks once the prompt is 1,024 tokens long), which the usage reports as cached.

Issue 23: every demo round 0 reported exactly 900 input tokens, whatever it sent, and a 1 MB
result was counted at 307,010 tokens in a run that reported 240,907.

Pure (no Flask, no database): the scenario's request bodies are read back into a
:class:`~webapp.replay.history.History` as ingestion would store them, and the usage dicts in
those bodies get their numbers before anything is posted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ..analytics.context import StoredCounts, conversation_context
from ..replay.history import History, Message, ServiceCall, ToolCall, ToolDefinition
from .catalog import CHANNELS
from .payloads import JSON, Scenario, count_text

# Framing: this many tokens, and this share of the content (seeded per service call, within
# what the context chart calls framing: webapp.analytics.conversation_charts.framing_explains).
FRAMING_TOKENS = (8, 24)
FRAMING_SHARE = (0.02, 0.08)
# OpenAI's prompt cache: prompts from this many tokens, in blocks of this size, for this long.
CACHE_MIN_TOKENS = 1024
CACHE_BLOCK = 128
CACHE_SECONDS = 300
# A message whose time is not known yet (the MessageTool API posts calls before their message).
_LATER = datetime.max.replace(tzinfo=UTC)


@dataclass
class _Run:
    """An assistant message as the requests build it up."""

    id: str
    created_at: datetime
    content: str | None = None
    status: str | None = None
    model: str | None = None
    calls: dict[tuple[int, int], JSON] = field(default_factory=dict)
    usage: dict[int, JSON] = field(default_factory=dict)  # round -> the body's usage dict


@dataclass
class _Conversation:
    channel: str | None = None
    system_prompt: str | None = None
    tools: list[JSON] = field(default_factory=list)
    messages: list[JSON | _Run] = field(default_factory=list)  # user messages are JSON
    runs: dict[str, _Run] = field(default_factory=dict)

    def run(self, body: JSON, created_at: datetime | None = None) -> _Run:
        run = self.runs.get(body["id"])
        if run is None:
            at = created_at or _time(body.get("created_at"))
            run = self.runs[body["id"]] = _Run(body["id"], at)  # type: ignore[arg-type]
            self.messages.append(run)
        if run.created_at == _LATER and body.get("created_at"):
            run.created_at = _time(body["created_at"])  # type: ignore[assignment]
        for key in ("content", "status", "model"):
            if body.get(key) is not None:
                setattr(run, key, body[key])
        return run


def settle_usage(scenario: Scenario) -> Scenario:
    """Give every usage dict of the scenario its input, cached tokens (in place); returns it."""
    conversation = _read(scenario)
    if not any(run.usage for run in conversation.runs.values()):
        return scenario
    history = _history(scenario.conversation_id, conversation)
    model = next((r.model for r in conversation.runs.values() if r.model), None)
    window = CHANNELS.get(conversation.channel or "")
    ctx = conversation_context(
        history,
        StoredCounts(),
        count=lambda text: count_text(text, model),
        freshness_seconds=window,
    )
    cache: dict[str, tuple[datetime, int]] = {}  # model -> (answered at, input) of the last call
    for bar in ctx.bars:
        usage = conversation.runs[bar.message_id].usage.get(bar.round_index)
        if usage is None:
            continue
        rng = random.Random(f"{scenario.conversation_id}:{bar.message_id}:{bar.round_index}")
        framing = rng.randint(*FRAMING_TOKENS) + round(bar.total * rng.uniform(*FRAMING_SHARE))
        sent = bar.total + framing
        usage["input_tokens"] = sent
        usage["cached_tokens"] = 0
        answered = _time(usage.get("created_at")) or bar.created_at
        key = f"{usage.get('provider')}/{usage.get('model')}"
        last = cache.get(key)
        if (
            usage.get("provider") == "openai"
            and last is not None
            and answered is not None
            and answered - last[0] <= timedelta(seconds=CACHE_SECONDS)
            and last[1] >= CACHE_MIN_TOKENS
        ):
            # The previous call's prompt is the start of this one (the history only grows).
            usage["cached_tokens"] = min(last[1], sent - 1) // CACHE_BLOCK * CACHE_BLOCK
        if answered is not None:
            cache[key] = (answered, sent)
    return scenario


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _read(scenario: Scenario) -> _Conversation:
    """The conversation the scenario's requests store (before redaction)."""
    conversation = _Conversation()
    for request in scenario.requests:
        body = request.body or {}
        parts = request.path.strip("/").split("/")
        if request.method == "PUT" and len(parts) == 2:
            conversation.channel = body.get("channel")
            conversation.system_prompt = body.get("system_prompt")
            conversation.tools = list(body.get("tools") or ())
        elif parts[-1] == "turns":
            if body.get("user"):
                conversation.messages.append(body["user"])
            assistant = body["assistant"]
            run = conversation.run(assistant)
            for index, round_ in enumerate(assistant.get("rounds") or ()):
                _add_round(run, index, round_.get("calls") or (), round_.get("usage"))
        elif parts[-1] == "messages":
            for message in body["messages"]:
                if message["role"] != "assistant":
                    conversation.messages.append(message)
                    continue
                run = conversation.run(message)
                for call in message.get("tool_calls") or ():
                    _add_round(run, call["round_index"], [call], None)
                for usage in message.get("usage") or ():
                    run.usage[usage["round_index"]] = usage
        elif len(parts) >= 2 and parts[-2] == "rounds":
            run = conversation.run({"id": parts[-3], **body})
            _add_round(run, int(parts[-1]), body.get("calls") or (), body.get("usage"))
        elif parts == ["messages", "tools"]:
            # The MessageTool API: calls first, their message later (created then).
            run = _Run(body["messageId"], _LATER)
            conversation.runs[run.id] = run
            conversation.messages.append(run)
            for tool in body["tools"]:
                call = {
                    "id": tool.get("externalToolCallId") or "",
                    "name": tool["functionName"],
                    "arguments": tool.get("arguments"),
                    "sequence_index": tool.get("sequenceIndex", 0),
                    "response": tool.get("response"),
                }
                run.calls[(tool.get("roundIndex", 0), call["sequence_index"])] = call
    return conversation


def _add_round(run: _Run, index: int, calls: Any, usage: JSON | None) -> None:
    for position, call in enumerate(calls):
        seq = call.get("sequence_index", position)
        known = run.calls.get((index, seq))
        # Posted again with its response: the server adds it to the call it has.
        if known is None or call.get("response") is not None:
            run.calls[(index, seq)] = call
    if usage is not None:
        run.usage[index] = usage


def _history(conversation_id: str, conversation: _Conversation) -> History:
    messages = []
    row = 0
    for item in conversation.messages:
        row += 1
        if isinstance(item, dict):
            messages.append(
                Message(
                    row_id=row,
                    external_id=item["id"],
                    role=item["role"],
                    content=item.get("content"),
                    created_at=_time(item.get("created_at")) or _LATER,
                )
            )
            continue
        calls = []
        for (index, seq), call in sorted(item.calls.items()):
            row += 1
            response = call.get("response") or {}
            created = _time(call.get("created_at")) or item.created_at
            calls.append(
                ToolCall(
                    row_id=row,
                    external_id=call.get("id") or "",
                    function_name=call["name"],
                    arguments=call.get("arguments"),
                    round_index=index,
                    sequence_index=seq,
                    created_at=created,
                    response=response.get("content") if "response" in call else None,
                    response_created_at=_time(response.get("created_at")) or created,
                    is_error=bool(response.get("is_error")),
                )
            )
        service_calls = tuple(
            ServiceCall(
                round_index=index,
                model=usage.get("model"),
                created_at=_time(usage.get("created_at")),
            )
            for index, usage in sorted(item.usage.items())
        )
        messages.append(
            Message(
                row_id=row,
                external_id=item.id,
                role="assistant",
                content=item.content,
                created_at=item.created_at,
                status=item.status or "completed",
                model=item.model,
                tool_calls=tuple(calls),
                service_calls=service_calls,
            )
        )
    return History(
        conversation_id=conversation_id,
        channel=conversation.channel,
        system_prompt=conversation.system_prompt,
        tool_definitions=tuple(
            ToolDefinition(t["name"], t.get("description"), t.get("parameters"))
            for t in conversation.tools
        ),
        messages=tuple(messages),
    )
