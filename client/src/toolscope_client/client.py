"""`ToolscopeClient`: the API's endpoints as methods, within the server's limits, never raising
into the agent's loop (unless asked to)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import requests

from .adapters import tool_definition
from .batching import (
    JSON,
    chunks,
    list_data,
    list_object,
    message_batches,
    round_calls,
)
from .delivery import Delivery
from .limits import Limits, ServerLimits
from .transport import Transport, segment

log = logging.getLogger("toolscope.client")

F = TypeVar("F", bound=Callable[..., Any])


def _agent_safe(fallback: Callable[[], Any] = lambda: None) -> Callable[[F], F]:
    """Unless `raise_errors`, nothing a public method does may raise into the agent's loop:
    unexpected errors (an unserialisable argument, a bug here) are logged and swallowed."""

    def decorate(method: F) -> F:
        @functools.wraps(method)
        def wrapper(self: ToolscopeClient, *args: Any, **kwargs: Any) -> Any:
            if self.raise_errors:
                return method(self, *args, **kwargs)
            try:
                return method(self, *args, **kwargs)
            except Exception:
                log.exception("Toolscope client error ignored in %s", method.__name__)
                return fallback()

        return wrapper  # type: ignore[return-value]

    return decorate


class ToolscopeClient:
    """Records conversations, turns, rounds and MessageTool batches in Toolscope.

    Every write method returns the server's JSON answer, or ``None`` when the request could not
    be delivered (it is then buffered, unless ``raise_errors``) or was refused with a 4xx (logged).
    Thread-safe: one instance can be shared by all of an agent's threads.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.2,
        raise_errors: bool = False,
        buffer_size: int = 10_000,
        buffer_bytes: int = 64 * 1024 * 1024,
        probe_interval: float = 1.0,
        session: requests.Session | None = None,
        limits: Limits | None = None,
    ):
        if retries < 0 or buffer_size < 0 or timeout <= 0:
            raise ValueError("retries and buffer_size must be >= 0 and timeout > 0")
        transport = Transport(
            base_url, api_key, timeout=timeout, retries=retries, backoff=backoff, session=session
        )
        self._delivery = Delivery(
            transport,
            raise_errors=raise_errors,
            buffer_size=buffer_size,
            buffer_bytes=buffer_bytes,
            probe_interval=probe_interval,
        )
        self._limits = ServerLimits(transport, lambda: self._delivery.is_down, limits)

    # -- state ---------------------------------------------------------------------------------

    @property
    def raise_errors(self) -> bool:
        """Raise `ToolscopeError`s instead of logging, buffering and answering None."""
        return self._delivery.raise_errors

    @raise_errors.setter
    def raise_errors(self, value: bool) -> None:
        self._delivery.raise_errors = value

    @property
    def api_base(self) -> str:
        return self._delivery.transport.api_base

    @property
    def limits(self) -> Limits:
        """The server's limits (asked once, `GET /api/v1/meta`), or the documented defaults."""
        return self._limits.get()

    @property
    def dropped(self) -> int:
        """Buffered requests thrown away because the buffer was full (oldest first)."""
        return self._delivery.dropped

    @property
    def pending(self) -> int:
        """Requests waiting in the buffer for Toolscope to come back."""
        return self._delivery.pending

    @property
    def rejected(self) -> int:
        """Requests Toolscope refused with a 4xx (logged, not retried)."""
        return self._delivery.rejected

    @_agent_safe(lambda: False)
    def flush(self) -> bool:
        """Send the buffered requests now, in order. True when the buffer is empty afterwards."""
        return self._delivery.flush()

    def close(self) -> None:
        """Try once more to deliver the buffer, then close the HTTP session."""
        self.flush()
        self._delivery.transport.close()

    def __enter__(self) -> ToolscopeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- native API ----------------------------------------------------------------------------

    @_agent_safe()
    def put_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        channel: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        created_at: datetime | str | None = None,
    ) -> JSON | None:
        """Create or update a conversation; `tools` are definitions `{name, description,
        parameters}` (an OpenAI `tools=[{"type": "function", "function": {...}}]` list works)."""
        body: JSON = {
            "title": title,
            "channel": channel,
            "metadata": dict(metadata) if metadata is not None else None,
            "system_prompt": system_prompt,
            "tools": [tool_definition(tool) for tool in tools] if tools is not None else None,
            "created_at": created_at,
        }
        body = {key: value for key, value in body.items() if value is not None}
        return self._delivery.write("PUT", f"/conversations/{segment(conversation_id)}", body)

    @_agent_safe()
    def record_messages(
        self, conversation_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[JSON] | None:
        """Post messages (native shape, assistant messages may carry `tool_calls`).

        Split into requests that respect the server's limits (messages and tool calls per
        request); a message with more tool calls than one request takes is posted without
        them, followed by its calls round by round.
        """
        path = f"/conversations/{segment(conversation_id)}/messages"
        limits = self.limits
        stored: list[JSON] = []
        delivered = True
        batches = message_batches(
            messages, limits.max_messages_per_request, limits.max_tools_per_request
        )
        for batch, overflow in batches:
            answer = self._delivery.write("POST", path, {"messages": batch})
            delivered &= answer is not None
            stored.extend(list_data(answer))
            for message_id, round_index, calls in overflow:
                delivered &= (
                    self.record_round(conversation_id, message_id, round_index, calls) is not None
                )
        return stored if delivered else None

    @_agent_safe()
    def record_turn(
        self,
        conversation_id: str,
        *,
        user: Mapping[str, Any] | None = None,
        assistant: Mapping[str, Any],
        rounds: Sequence[Mapping[str, Any]] = (),
    ) -> JSON | None:
        """Record a whole turn (per-run persistence) in one request and one transaction.

        `rounds` is a list of `{"calls": [ToolCall...], "usage"?: {...}}`, one per LLM service
        call; calls take their position as `sequence_index` unless they give one. A turn with
        more calls than one request takes is sent as messages plus rounds (still idempotent,
        but no longer one transaction).
        """
        total = sum(len(r.get("calls") or ()) for r in rounds)
        if total > self.limits.max_tools_per_request:
            return self._record_large_turn(conversation_id, user, assistant, rounds)
        # The turn's assistant needs no role; calls take their round from the round they are in.
        turn_assistant = {k: v for k, v in assistant.items() if k != "role"}
        turn_rounds = [{**r, "calls": round_calls(r.get("calls") or ())} for r in rounds]
        body = {"user": user, "assistant": {**turn_assistant, "rounds": turn_rounds}}
        path = f"/conversations/{segment(conversation_id)}/turns"
        return self._delivery.write("POST", path, body)

    @_agent_safe()
    def record_round(
        self,
        conversation_id: str,
        message_id: str,
        round_index: int,
        calls: Sequence[Mapping[str, Any]],
        usage: Mapping[str, Any] | None = None,
        status: str | None = None,
        content: str | None = None,
    ) -> JSON | None:
        """Record one LLM service call's tool calls (per-service-call persistence).

        Post a round's calls as soon as the model asks for them and again with their responses;
        the server merges them. `status` updates the assistant message's run status
        (`in_progress`, `completed`, `failed`, `cancelled`); `content` is the run's final answer
        (the assistant message's text), sent with the status that ends the run or before it.
        Returns the message as stored.
        """
        path = (
            f"/conversations/{segment(conversation_id)}/messages/{segment(message_id)}"
            f"/rounds/{int(round_index)}"
        )
        # A call without sequence_index takes its position in the round, as the server would
        # give it; given here, it survives the round being split over several requests.
        numbered = [{"sequence_index": position, **call} for position, call in enumerate(calls)]
        parts = list(chunks(numbered, self.limits.max_tools_per_request)) or [[]]
        answers: list[JSON | None] = []
        for number, part in enumerate(parts):
            body: JSON = {"calls": round_calls(part)}
            # Usage with the first request, status (and the answer) with the last: "completed"
            # must not arrive before the calls it completes.
            if number == 0 and usage is not None:
                body["usage"] = dict(usage)
            if number == len(parts) - 1:
                if content is not None:
                    body["content"] = content
                if status is not None:
                    body["status"] = status
            answers.append(self._delivery.write("POST", path, body))
        if any(answer is None for answer in answers):
            return None
        # The server answers with the whole message: the last answer holds every call.
        return answers[-1]

    @_agent_safe()
    def import_conversation(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        format: str = "openai-chat",
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        started_at: datetime | str | None = None,
    ) -> JSON | None:
        """Turn a provider message list (`openai-chat`, `openai-responses`, `anthropic`) into a
        conversation; Toolscope derives rounds and sequence indices."""
        key = "input" if format == "openai-responses" else "messages"
        body: JSON = {"format": format, key: list(messages)}
        if system is not None:
            body["system"] = system
        if tools is not None:
            body["tools"] = list(tools)
        if started_at is not None:
            body["started_at"] = started_at
        path = f"/conversations/{segment(conversation_id)}/import"
        return self._delivery.write("POST", path, body)

    @_agent_safe()
    def get_conversation(self, conversation_id: str) -> JSON | None:
        """A stored conversation with its messages, tool calls and usage (None if unreachable)."""
        return self._delivery.read(f"/conversations/{segment(conversation_id)}")

    # -- MessageTool-compatible API (`unique_sdk.MessageTool`) ---------------------------------

    @_agent_safe()
    def create_message_tools(
        self, message_id: str, tools: Sequence[Mapping[str, Any]]
    ) -> JSON | None:
        """`MessageTool.create_many`: camelCase ToolItems, split into requests within the
        server's limit (50 by default).

        Each item is keyed by (message, roundIndex, sequenceIndex), so a retried batch is stored
        once. Returns the merged list object, or None if any batch was not delivered.
        """
        merged: list[JSON] = []
        delivered = True
        for part in chunks(list(tools), self.limits.max_tools_per_request):
            answer = self._delivery.write(
                "POST", "/messages/tools", {"messageId": message_id, "tools": list(part)}
            )
            delivered &= answer is not None
            merged.extend(list_data(answer))
        return list_object(merged) if delivered else None

    @_agent_safe(lambda: list_object([]))
    def get_message_tools(self, message_ids: Iterable[str] | str) -> JSON:
        """`MessageTool.get_message_tools`: one GET per 200 ids (the server's limit), merged.

        Reads are not buffered: when Toolscope is unreachable this logs a warning and returns an
        empty list (as unique_toolkit's history loader does), unless `raise_errors`.
        """
        if isinstance(message_ids, str):
            message_ids = message_ids.split(",")
        ids = list(dict.fromkeys(i for i in (m.strip() for m in message_ids) if i))
        if not ids:
            return list_object([])
        merged: list[JSON] = []
        for part in chunks(ids, self.limits.max_ids_per_request):
            answer = self._delivery.read("/messages/tools", {"messageIds": ",".join(part)})
            if answer is None:
                return list_object([])
            merged.extend(list_data(answer))
        return list_object(merged)

    # -- a turn too big for one request ---------------------------------------------------------

    def _record_large_turn(
        self,
        conversation_id: str,
        user: Mapping[str, Any] | None,
        assistant: Mapping[str, Any],
        rounds: Sequence[Mapping[str, Any]],
    ) -> JSON | None:
        messages = [{"role": "user", **user}] if user else []
        messages.append({"role": "assistant", **assistant})
        usage = [
            {"round_index": index, **r["usage"]} for index, r in enumerate(rounds) if r.get("usage")
        ]
        if usage:
            messages[-1]["usage"] = usage
        if self.record_messages(conversation_id, messages) is None:
            return None
        message_id = assistant["id"]
        delivered = True
        for index, r in enumerate(rounds):
            answer = self.record_round(conversation_id, message_id, index, r.get("calls") or ())
            delivered &= answer is not None
        return self.get_conversation(conversation_id) if delivered else None
