"""A small Python client for agents: record tool calls in Toolscope without ever breaking the agent.

Only `requests` is needed (no Flask, no SQLAlchemy), so agents can import this module alone.

    from webapp.client import ToolscopeClient

    toolscope = ToolscopeClient("http://127.0.0.1:8000", "ts_...")
    toolscope.record_turn("chat-1", user={...}, assistant={...}, rounds=[...])

Failure policy (DESIGN.md: "the agent never breaks because Toolscope is down"):

* Writes are retried with exponential backoff on connection errors, timeouts, 5xx and 429 —
  never on other 4xx, which mean the payload itself is wrong. Retrying is safe because every
  write is idempotent on the server (tool calls are keyed by message, round and sequence).
* With the default ``raise_errors=False`` nothing raises into the agent's loop: when Toolscope
  stays unreachable the request is kept in a bounded in-memory buffer and sent, in order, on the
  next successful call or :meth:`ToolscopeClient.flush`. Beyond the buffer the oldest request is
  dropped and counted in :attr:`ToolscopeClient.dropped`. One warning is logged per outage, not
  per call, and while the outage lasts new writes go straight to the buffer (one probe per
  ``probe_interval``) so a dead server does not slow the agent down.
* ``raise_errors=True`` turns this off: failures raise :class:`ToolscopeUnavailable` or
  :class:`ToolscopeRequestError` and nothing is buffered.

The client is thread-safe: one instance can be shared by all of an agent's threads.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import requests

__all__ = [
    "MAX_IDS_PER_REQUEST",
    "MAX_MESSAGES_PER_REQUEST",
    "MAX_TOOLS_PER_REQUEST",
    "ToolscopeClient",
    "ToolscopeError",
    "ToolscopeRequestError",
    "ToolscopeUnavailable",
    "calls_from_openai",
    "usage_from_openai",
]

log = logging.getLogger("toolscope.client")

# The server's default limits (webapp/settings.py); the client splits its requests to stay below.
MAX_TOOLS_PER_REQUEST = 50
MAX_IDS_PER_REQUEST = 200
MAX_MESSAGES_PER_REQUEST = 500
API_PREFIX = "/api/v1"
# A 429's Retry-After is honoured, but never beyond this: the agent is waiting.
MAX_RETRY_AFTER_SECONDS = 5.0
USER_AGENT = "toolscope-client/0.1"

JSON = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


class ToolscopeError(Exception):
    """Base class of the errors raised when ``raise_errors=True``."""


class ToolscopeUnavailable(ToolscopeError):
    """Toolscope could not be reached, or kept answering 5xx/429, after all retries."""


class ToolscopeRequestError(ToolscopeError):
    """Toolscope refused the request (4xx): the payload or the key is wrong; not retried."""

    def __init__(self, status: int, body: Any, method: str, path: str):
        self.status = status
        self.body = body
        self.method = method
        self.path = path
        error = _error_object(body)
        self.error = error.get("code")  # e.g. "invalid", "conflict"
        self.details = error.get("details")
        message = error.get("message") or str(body)[:500]
        super().__init__(f"{method} {path} -> {status}: {message}")


def _error_object(body: Any) -> dict[str, Any]:
    """The error of an answer: `{"error": {"message", "code", ...}}`, or the flat
    `{"error": code, "message", "details"}` of servers before 0.2."""
    if not isinstance(body, dict):
        return {}
    error = body.get("error")
    if isinstance(error, dict):
        return error
    return {"code": error, "message": body.get("message"), "details": body.get("details")}


class _Transient(Exception):
    """A failure worth retrying: no connection, a timeout, 5xx or 429."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


@dataclass
class _PendingRequest:
    """A write request, its body already encoded (the buffer is bounded in bytes too)."""

    method: str
    path: str
    body: bytes
    answer: Any = None

    @property
    def size(self) -> int:
        return len(self.body)


@dataclass
class _Outage:
    since: float
    last_attempt: float
    reason: str
    drop_warned: bool = False


@dataclass
class _Buffer:
    """The requests waiting for Toolscope to come back, oldest first, bounded in count and bytes."""

    max_items: int
    max_bytes: int
    items: deque[_PendingRequest] = field(default_factory=deque)
    bytes: int = 0
    dropped: int = 0

    def append(self, item: _PendingRequest) -> int:
        """Queue a request; returns how many old requests had to be dropped to make room."""
        self.items.append(item)
        self.bytes += item.size
        dropped = 0
        while self.items and (len(self.items) > self.max_items or self.bytes > self.max_bytes):
            self.bytes -= self.items.popleft().size
            dropped += 1
        self.dropped += dropped
        return dropped

    def remove_head(self, item: _PendingRequest) -> None:
        # The head may have been dropped by an overflow while it was in flight.
        if self.items and self.items[0] is item:
            self.bytes -= self.items.popleft().size


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


def _json_default(value: Any) -> Any:
    """Encode what agents commonly put in arguments: datetimes, pydantic models, sets."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def _encode(payload: Any) -> bytes:
    return json.dumps(payload, default=_json_default, ensure_ascii=False).encode()


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _api_base(base_url: str) -> str:
    """Accept both the server root and the API root (`.../api/v1`), as unique_sdk users have."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    base = base_url.rstrip("/")
    return base if base.endswith(API_PREFIX) else base + API_PREFIX


def _segment(value: str | int) -> str:
    """A URL path segment: agent ids may contain '/', '?', spaces..."""
    return quote(str(value), safe="")


class ToolscopeClient:
    """Records conversations, turns, rounds and MessageTool batches in Toolscope.

    Every write method returns the server's JSON answer, or ``None`` when the request could not
    be delivered (it is then buffered, unless ``raise_errors``) or was refused with a 4xx (logged).
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
    ):
        if retries < 0 or buffer_size < 0 or timeout <= 0:
            raise ValueError("retries and buffer_size must be >= 0 and timeout > 0")
        self.api_base = _api_base(base_url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.raise_errors = raise_errors
        self.probe_interval = probe_interval
        self._session = session or requests.Session()
        self._owns_session = session is None
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self._buffer = _Buffer(buffer_size, buffer_bytes)
        self._outage: _Outage | None = None
        # _lock guards the buffer and the outage state (short critical sections only);
        # _flush_lock lets one thread at a time send the buffer, so its order is kept.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self.rejected = 0

    # -- state ---------------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        """Buffered requests thrown away because the buffer was full (oldest first)."""
        return self._buffer.dropped

    @property
    def pending(self) -> int:
        """Requests waiting in the buffer for Toolscope to come back."""
        with self._lock:
            return len(self._buffer.items)

    def close(self) -> None:
        """Try once more to deliver the buffer, then close the HTTP session."""
        self.flush()
        if self._owns_session:
            self._session.close()

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
            "tools": [_tool_definition(tool) for tool in tools] if tools is not None else None,
            "created_at": created_at,
        }
        body = {key: value for key, value in body.items() if value is not None}
        return self._write("PUT", f"/conversations/{_segment(conversation_id)}", body)

    @_agent_safe()
    def record_messages(
        self, conversation_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[JSON] | None:
        """Post messages (native shape, assistant messages may carry `tool_calls`).

        Split into requests that respect the server's limits (messages and tool calls per
        request); a message with more tool calls than one request takes is posted without
        them, followed by its calls round by round.
        """
        path = f"/conversations/{_segment(conversation_id)}/messages"
        stored: list[JSON] = []
        delivered = True
        for batch, overflow in _message_batches(messages):
            answer = self._write("POST", path, {"messages": batch})
            delivered &= answer is not None
            stored.extend(_list_data(answer))
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
        path = f"/conversations/{_segment(conversation_id)}/turns"
        # The turn's assistant needs no role; calls take their round from the round they are in.
        turn_assistant = {k: v for k, v in assistant.items() if k != "role"}
        turn_rounds = [{**r, "calls": _round_calls(r.get("calls") or ())} for r in rounds]
        body = {"user": user, "assistant": {**turn_assistant, "rounds": turn_rounds}}
        total = sum(len(r.get("calls") or ()) for r in rounds)
        if total <= MAX_TOOLS_PER_REQUEST:
            return self._write("POST", path, body)
        return self._record_large_turn(conversation_id, user, assistant, rounds)

    @_agent_safe()
    def record_round(
        self,
        conversation_id: str,
        message_id: str,
        round_index: int,
        calls: Sequence[Mapping[str, Any]],
        usage: Mapping[str, Any] | None = None,
        status: str | None = None,
    ) -> JSON | None:
        """Record one LLM service call's tool calls (per-service-call persistence).

        Post a round's calls as soon as the model asks for them and again with their responses;
        the server merges them. `status` updates the assistant message's run status
        (`in_progress`, `completed`, `failed`, `cancelled`).
        """
        path = (
            f"/conversations/{_segment(conversation_id)}/messages/{_segment(message_id)}"
            f"/rounds/{int(round_index)}"
        )
        chunks = list(_chunks(list(calls), MAX_TOOLS_PER_REQUEST)) or [[]]
        answers: list[JSON | None] = []
        for number, chunk in enumerate(chunks):
            body: JSON = {"calls": _round_calls(chunk)}
            # Usage with the first request, status with the last: "completed" must not arrive
            # before the calls it completes.
            if number == 0 and usage is not None:
                body["usage"] = dict(usage)
            if number == len(chunks) - 1 and status is not None:
                body["status"] = status
            answers.append(self._write("POST", path, body))
        if any(answer is None for answer in answers):
            return None
        return answers[0] if len(answers) == 1 else _merge_rounds(answers)

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
        return self._write("POST", f"/conversations/{_segment(conversation_id)}/import", body)

    # -- MessageTool-compatible API (seed 003) --------------------------------------------------

    @_agent_safe()
    def create_message_tools(
        self, message_id: str, tools: Sequence[Mapping[str, Any]]
    ) -> JSON | None:
        """`MessageTool.create_many`: camelCase ToolItems, split into requests of at most 50.

        Each item is keyed by (message, roundIndex, sequenceIndex), so a retried batch is stored
        once. Returns the merged list object, or None if any batch was not delivered.
        """
        merged: list[JSON] = []
        delivered = True
        for chunk in _chunks(list(tools), MAX_TOOLS_PER_REQUEST):
            answer = self._write(
                "POST", "/messages/tools", {"messageId": message_id, "tools": list(chunk)}
            )
            delivered &= answer is not None
            merged.extend(_list_data(answer))
        return _list_object(merged) if delivered else None

    @_agent_safe(lambda: _list_object([]))
    def get_message_tools(self, message_ids: Iterable[str] | str) -> JSON:
        """`MessageTool.get_message_tools`: one GET per 200 ids, results merged.

        Reads are not buffered: when Toolscope is unreachable this logs a warning and returns an
        empty list (as seed 000's history loader does), unless `raise_errors`.
        """
        if isinstance(message_ids, str):
            message_ids = message_ids.split(",")
        ids = list(dict.fromkeys(i for i in (m.strip() for m in message_ids) if i))
        merged: list[JSON] = []
        for chunk in _chunks(ids, MAX_IDS_PER_REQUEST):
            answer = self._read("/messages/tools", {"messageIds": ",".join(chunk)})
            if answer is None:
                return _list_object([])
            merged.extend(_list_data(answer))
        return _list_object(merged)

    @_agent_safe()
    def get_conversation(self, conversation_id: str) -> JSON | None:
        """A stored conversation with its messages, tool calls and usage (None if unreachable)."""
        return self._read(f"/conversations/{_segment(conversation_id)}", None)

    # -- delivery ------------------------------------------------------------------------------

    @_agent_safe(lambda: False)
    def flush(self) -> bool:
        """Send the buffered requests now, in order. True when the buffer is empty afterwards."""
        with self._flush_lock:
            self._drain_locked(force=True)
        return self.pending == 0

    def _write(self, method: str, path: str, payload: Any) -> Any:
        request = _PendingRequest(method, path, _encode(payload))
        if self.raise_errors:
            return self._send(request, self.retries)
        with self._lock:
            backlog = bool(self._buffer.items) or self._outage is not None
            if backlog:
                self._enqueue_locked(request)
        if backlog:
            # Behind older requests: they go first, so a round's responses never overtake the
            # calls they answer. If another thread is already flushing, it will take ours too.
            if self._flush_lock.acquire(blocking=False):
                try:
                    self._drain_locked(force=False)
                finally:
                    self._flush_lock.release()
            return request.answer
        try:
            return self._send(request, self.retries)
        except _Transient as exc:
            with self._lock:
                self._start_outage_locked(exc.reason)
                self._enqueue_locked(request)
            return None
        except ToolscopeRequestError as exc:
            self._log_rejected(exc)
            return None

    def _read(self, path: str, params: Mapping[str, str] | None) -> Any:
        request = _PendingRequest("GET", path, b"")
        try:
            return self._send(request, self.retries, params=params)
        except _Transient as exc:
            log.warning("Toolscope read %s failed: %s", path, exc.reason)
            if self.raise_errors:
                raise ToolscopeUnavailable(exc.reason) from None
        except ToolscopeRequestError as exc:
            if self.raise_errors:
                raise
            self._log_rejected(exc)
        return None

    def _drain_locked(self, *, force: bool) -> None:
        """Send buffered requests oldest first until empty or Toolscope fails again.

        The caller holds `_flush_lock`. While an outage lasts, one request probes the server at
        most once per `probe_interval` (unless forced) and without retries.
        """
        while True:
            with self._lock:
                if not self._buffer.items:
                    self._end_outage_locked()
                    return
                outage = self._outage
                now = time.monotonic()
                if outage and not force and now - outage.last_attempt < self.probe_interval:
                    return
                if outage:
                    outage.last_attempt = now
                item = self._buffer.items[0]
            try:
                item.answer = self._send(item, 0 if outage else self.retries)
            except _Transient as exc:
                with self._lock:
                    self._start_outage_locked(exc.reason)
                return
            except ToolscopeRequestError as exc:
                # Refused for good (a conflict, a revoked key...): retrying cannot help.
                self._log_rejected(exc)
            with self._lock:
                self._buffer.remove_head(item)

    def _send(
        self, request: _PendingRequest, retries: int, params: Mapping[str, str] | None = None
    ) -> Any:
        """One request with up to `retries` retries; raises _Transient or ToolscopeRequestError
        (ToolscopeUnavailable instead of _Transient when raise_errors)."""
        url = self.api_base + request.path
        for attempt in range(retries + 1):
            try:
                return self._attempt(request, url, params)
            except _Transient as exc:
                if attempt == retries:
                    if self.raise_errors:
                        raise ToolscopeUnavailable(
                            f"{request.method} {url}: {exc.reason}"
                        ) from None
                    raise
                time.sleep(self._delay(attempt, exc.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, request: _PendingRequest, url: str, params: Any) -> Any:
        try:
            response = self._session.request(
                request.method,
                url,
                data=request.body or None,
                params=params,
                headers=self._headers,
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            # requests' messages nest urllib3's; the innermost cause is the readable part.
            cause = exc.__context__ or exc
            raise _Transient(f"{type(exc).__name__}: {str(cause)[-200:]}") from None
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Transient(f"HTTP {status}", _retry_after(response))
        body = _json_or_text(response)
        if status >= 400:
            raise ToolscopeRequestError(status, body, request.method, request.path)
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_SECONDS)
        # Full jitter: many agents retrying after the same blip do not return in lockstep.
        return self.backoff * (2**attempt) * (0.5 + random.random() / 2)

    # -- outage bookkeeping (callers hold _lock) -----------------------------------------------

    def _enqueue_locked(self, request: _PendingRequest) -> None:
        dropped = self._buffer.append(request)
        if dropped and self._outage and not self._outage.drop_warned:
            self._outage.drop_warned = True
            log.warning(
                "Toolscope buffer full (%d requests, %d bytes): dropping the oldest requests; "
                "see ToolscopeClient.dropped",
                self._buffer.max_items,
                self._buffer.max_bytes,
            )

    def _start_outage_locked(self, reason: str) -> None:
        now = time.monotonic()
        if self._outage is None:
            self._outage = _Outage(since=now, last_attempt=now, reason=reason)
            log.warning(
                "Toolscope unreachable at %s (%s); buffering up to %d requests until it is back",
                self.api_base,
                reason,
                self._buffer.max_items,
            )
        else:
            self._outage.last_attempt = now

    def _end_outage_locked(self) -> None:
        if self._outage is not None:
            log.warning(
                "Toolscope reachable again after %.1f s; buffer delivered (%d dropped so far)",
                time.monotonic() - self._outage.since,
                self._buffer.dropped,
            )
            self._outage = None

    def _log_rejected(self, exc: ToolscopeRequestError) -> None:
        with self._lock:
            self.rejected += 1
        details = f" details={exc.details}" if exc.details else ""
        log.warning("Toolscope refused %s%s", exc, details)

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
        delivered = True
        for index, r in enumerate(rounds):
            calls = [
                {"sequence_index": position, **call}
                for position, call in enumerate(r.get("calls") or ())
            ]
            answer = self.record_round(conversation_id, assistant["id"], index, calls)
            delivered &= answer is not None
        return self.get_conversation(conversation_id) if delivered else None


# -- pure helpers ------------------------------------------------------------------------------


def _round_calls(calls: Iterable[Mapping[str, Any]]) -> list[JSON]:
    return [{k: v for k, v in call.items() if k != "round_index"} for call in calls]


def _list_object(data: list[JSON]) -> JSON:
    return {"object": "list", "data": data, "has_more": False}


def _list_data(answer: Any) -> list[JSON]:
    if isinstance(answer, dict) and isinstance(answer.get("data"), list):
        return answer["data"]
    return []


def _merge_rounds(answers: list[Any]) -> JSON:
    merged = dict(answers[-1]) if isinstance(answers[-1], dict) else {}
    merged["calls"] = [call for a in answers if isinstance(a, dict) for call in a.get("calls", [])]
    return merged


def _json_or_text(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _retry_after(response: requests.Response) -> float | None:
    raw = response.headers.get("Retry-After", "")
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def _tool_definition(tool: Mapping[str, Any]) -> JSON:
    """Our `{name, description, parameters}` from itself or from an OpenAI/Anthropic tool."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), Mapping):
        tool = tool["function"]
    definition = {"name": tool["name"]}
    if tool.get("description") is not None:
        definition["description"] = tool["description"]
    parameters = tool.get("parameters", tool.get("input_schema"))
    if parameters is not None:
        definition["parameters"] = parameters
    return definition


OverflowRound = tuple[str, int, list[JSON]]


def _message_batches(
    messages: Sequence[Mapping[str, Any]],
    max_messages: int = MAX_MESSAGES_PER_REQUEST,
    max_calls: int = MAX_TOOLS_PER_REQUEST,
) -> Iterator[tuple[list[JSON], list[OverflowRound]]]:
    """Group messages into requests within both limits, keeping their order.

    Yields (messages for one request, rounds to post right after it). A message whose own calls
    exceed `max_calls` travels without them; its calls follow as rounds.
    """
    batch: list[JSON] = []
    calls_in_batch = 0
    for original in messages:
        message = dict(original)
        calls = list(message.get("tool_calls") or ())
        overflow: list[OverflowRound] = []
        if len(calls) > max_calls:
            message.pop("tool_calls")
            by_round: dict[int, list[JSON]] = {}
            for call in calls:
                by_round.setdefault(int(call["round_index"]), []).append(
                    {k: v for k, v in call.items() if k != "round_index"}
                )
            overflow = [(message["id"], r, by_round[r]) for r in sorted(by_round)]
            calls = []
        if batch and (len(batch) >= max_messages or calls_in_batch + len(calls) > max_calls):
            yield batch, []
            batch, calls_in_batch = [], 0
        batch.append(message)
        calls_in_batch += len(calls)
        if overflow:
            yield batch, overflow
            batch, calls_in_batch = [], 0
    if batch:
        yield batch, []


# -- OpenAI helpers ----------------------------------------------------------------------------


def _as_dict(obj: Any) -> JSON:
    """An OpenAI SDK object (pydantic) or a plain dict, as a dict."""
    if obj is None:
        return {}
    if isinstance(obj, Mapping):
        return dict(obj)
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json", exclude_unset=False)
    return dict(vars(obj))


def _parse_arguments(raw: Any) -> JSON | None:
    """OpenAI sends arguments as a JSON string; models sometimes produce invalid JSON, which is
    kept verbatim under `_raw` rather than lost."""
    if raw is None or isinstance(raw, dict):
        return raw
    if not isinstance(raw, str) or not raw.strip():
        return None if raw in (None, "") else {"_raw": raw}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": parsed}


def _result_content(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, Mapping) and "content" in result:
        content = result["content"]
        return content if isinstance(content, str) else _encode(content).decode()
    return _encode(result).decode()


def calls_from_openai(
    assistant_message: Any,
    results: Mapping[str, Any] | Sequence[Any] | None = None,
    *,
    started_at: Mapping[str, datetime | str] | None = None,
    ended_at: Mapping[str, datetime | str] | None = None,
    errors: Iterable[str] = (),
) -> list[JSON]:
    """Our ToolCalls (without round_index) from one OpenAI chat-completions tool round.

    `assistant_message` is `completion.choices[0].message` (SDK object or dict) with
    `tool_calls`. `results` are the tool messages you appended (`{"role": "tool",
    "tool_call_id", "content"}`) or a `{tool_call_id: content}` mapping; calls without a result
    are recorded without a response. `started_at` / `ended_at` / `errors` are keyed by
    tool_call_id too.
    """
    message = _as_dict(assistant_message)
    by_id: dict[str, str] = {}
    if isinstance(results, Mapping):
        by_id = {str(k): _result_content(v) for k, v in results.items()}
    elif results is not None:
        for item in results:
            entry = _as_dict(item)
            by_id[str(entry.get("tool_call_id", ""))] = _result_content(entry.get("content"))
    failed = set(errors)
    calls: list[JSON] = []
    for position, raw_call in enumerate(message.get("tool_calls") or ()):
        tool_call = _as_dict(raw_call)
        function = _as_dict(tool_call.get("function"))
        call_id = tool_call.get("id") or ""
        call: JSON = {
            "id": call_id,
            "name": function.get("name", ""),
            "arguments": _parse_arguments(function.get("arguments")),
            "sequence_index": position,
        }
        if started_at and call_id in started_at:
            call["started_at"] = started_at[call_id]
        if ended_at and call_id in ended_at:
            call["ended_at"] = ended_at[call_id]
        if call_id in by_id:
            call["response"] = {"content": by_id[call_id], "is_error": call_id in failed}
        calls.append(call)
    return calls


def usage_from_openai(completion: Any) -> JSON | None:
    """Our round usage from a chat completion (`completion.usage`, `completion.model`)."""
    data = _as_dict(completion)
    usage = _as_dict(data.get("usage"))
    if not usage:
        return None
    details = _as_dict(usage.get("prompt_tokens_details"))
    result: JSON = {
        "model": data.get("model"),
        "provider": "openai",
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": usage.get("completion_tokens"),
        "cached_tokens": details.get("cached_tokens"),
    }
    return {key: value for key, value in result.items() if value is not None}
