"""Fake model providers on loopback, speaking the real wire formats: OpenAI Chat Completions
(`POST /v1/chat/completions`), OpenAI Responses (`POST /v1/responses`) and Anthropic Messages
(`POST /v1/messages`), for the runs tests (issue 25, item 7). Driven through the real `openai`
and `anthropic` SDKs: a threaded HTTP server on a real socket, standard library only.

The scripted model decides from what it receives, as a real agent model would:

* no result of a `lookup_order` call in the history: it calls `lookup_order` for the order
  the last user message names (`{"order_id": "A1"}`);
* the last `lookup_order` result failed (Anthropic's `is_error`, or a text starting with
  `ERROR`): it calls `lookup_order` again;
* a result is there: it answers `Order <id>: <the result's text>.`

So an edit or a replay policy that removes, replaces or fails the result changes the next
action. Usage comes in each provider's shape, counted from the request's size.

Failure modes, chosen by the model's name (or by the key):

=========================  =================================================================
model                      answer
=========================  =================================================================
`scripted*`                the scripted model (any other name: 404, the provider's "model
                           not found" error)
a wrong key                401 with the provider's authentication error
`scripted-too-long`        400, the provider's "context too long" error
`scripted-rate-limited`    429 every time (`retry-after-ms: 1`, so the SDK retries at once)
`scripted-slow`            the answer after `slow_seconds` (a timeout for the SDK)
`scripted-hold`            holds the request until `release()` (or `hold_seconds`), then
                           answers (a worker killed while it waits)
`scripted-not-json`        200 with a body that is not JSON
`scripted-wrong-shape`     200 with JSON of another shape
`scripted-drop`            closes the connection without an answer
=========================  =================================================================

Every request is logged (`requests`: path, model, body, headers) so tests assert what was
sent and count how often.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_KEY = "sk-test-fake-provider-key-0123456789"
TOOL = "lookup_order"
OPENAI_PATHS = ("/v1/chat/completions", "/v1/responses")
ANTHROPIC_PATH = "/v1/messages"


@dataclass
class Logged:
    path: str
    model: str | None
    body: Any
    headers: dict[str, str]


@dataclass
class FakeProviders:
    """The server: `start()`, `stop()`, `base_url` (OpenAI SDKs: `base_url + "/v1"`; Anthropic:
    `base_url`), `requests` (the log)."""

    api_key: str = API_KEY
    slow_seconds: float = 5.0
    hold_seconds: float = 30.0
    requests: list[Logged] = field(default_factory=list)
    # Requests being answered now, and the most at once (a study's concurrency bound).
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._held = threading.Event()  # a `scripted-hold` request arrived
        self._release = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- Lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeProviders:
        fake = self

        class Handler(_Handler):
            provider = fake

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    # --- For tests ----------------------------------------------------------------------------

    def log(self, entry: Logged) -> None:
        with self._lock:
            self.requests.append(entry)

    def count(self, path: str | None = None, model: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for r in self.requests
                if (path is None or r.path == path) and (model is None or r.model == model)
            )

    def wait_held(self, timeout: float = 30.0) -> bool:
        """Whether a `scripted-hold` request arrived within `timeout`."""
        return self._held.wait(timeout)

    def release(self) -> None:
        self._release.set()

    def hold(self) -> None:
        """Wait for `release()` (at most `hold_seconds`)."""
        self._held.set()
        self._release.wait(self.hold_seconds)


# --- The scripted model ----------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the scripted model does: call `lookup_order` with `order_id`, or answer `text`."""

    order_id: str
    text: str | None = None


_ORDER_RE = re.compile(r"order\s+#?([A-Za-z0-9-]+)", re.IGNORECASE)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                value = part.get("text", part.get("content", ""))
                parts.append(_text_of(value))
        return "".join(parts)
    return ""


def decide(user_texts: list[str], results: list[tuple[str, bool]]) -> Decision:
    """`user_texts`: the user messages' texts in order; `results`: the `lookup_order`
    results in order, each (text, failed)."""
    order_id = "A1"
    for text in user_texts:
        found = _ORDER_RE.search(text)
        if found:
            order_id = found.group(1)
    if not results:
        return Decision(order_id)
    text, failed = results[-1]
    if failed or text.startswith("ERROR"):
        return Decision(order_id)
    return Decision(order_id, f"Order {order_id}: {text}.")


def _chat_history(body: dict[str, Any]) -> tuple[list[str], list[tuple[str, bool]]]:
    users, results, lookup_ids = [], [], set()
    for message in body.get("messages") or []:
        role = message.get("role")
        if role == "user":
            users.append(_text_of(message.get("content")))
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                if (call.get("function") or {}).get("name") == TOOL:
                    lookup_ids.add(call.get("id"))
        elif role == "tool" and message.get("tool_call_id") in lookup_ids:
            results.append((_text_of(message.get("content")), False))
    return users, results


def _responses_history(body: dict[str, Any]) -> tuple[list[str], list[tuple[str, bool]]]:
    users, results, lookup_ids = [], [], set()
    items = body.get("input")
    if isinstance(items, str):
        return [items], []
    for item in items or []:
        kind = item.get("type")
        if item.get("role") == "user" and kind in (None, "message"):
            users.append(_text_of(item.get("content")))
        elif kind == "function_call" and item.get("name") == TOOL:
            lookup_ids.add(item.get("call_id"))
        elif kind == "function_call_output" and item.get("call_id") in lookup_ids:
            results.append((_text_of(item.get("output")), False))
    return users, results


def _anthropic_history(body: dict[str, Any]) -> tuple[list[str], list[tuple[str, bool]]]:
    users, results, lookup_ids = [], [], set()
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text") or "")
            elif kind == "tool_use" and block.get("name") == TOOL:
                lookup_ids.add(block.get("id"))
            elif kind == "tool_result" and block.get("tool_use_id") in lookup_ids:
                results.append((_text_of(block.get("content")), bool(block.get("is_error"))))
        if message.get("role") == "user" and texts:
            users.append("".join(texts))
    return users, results


def _tokens(body: Any) -> int:
    return max(1, len(json.dumps(body)) // 4)


def chat_answer(body: dict[str, Any], n: int) -> dict[str, Any]:
    decision = decide(*_chat_history(body))
    message: dict[str, Any] = {"role": "assistant", "content": decision.text, "refusal": None}
    if decision.text is None:
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {
                    "name": TOOL,
                    "arguments": json.dumps({"order_id": decision.order_id}),
                },
            }
        ]
    prompt, completion = _tokens(body), 12
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "stop" if decision.text is not None else "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    }


def responses_answer(body: dict[str, Any], n: int) -> dict[str, Any]:
    decision = decide(*_responses_history(body))
    if decision.text is None:
        output = [
            {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": TOOL,
                "arguments": json.dumps({"order_id": decision.order_id}),
                "status": "completed",
            }
        ]
    else:
        output = [
            {
                "type": "message",
                "id": f"msg_{n}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": decision.text, "annotations": []}],
            }
        ]
    prompt, completion = _tokens(body), 12
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": body.get("model"),
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        },
    }


def anthropic_answer(body: dict[str, Any], n: int) -> dict[str, Any]:
    decision = decide(*_anthropic_history(body))
    if decision.text is None:
        content = [
            {
                "type": "tool_use",
                "id": f"toolu_{n}",
                "name": TOOL,
                "input": {"order_id": decision.order_id},
            }
        ]
    else:
        content = [{"type": "text", "text": decision.text}]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": content,
        "stop_reason": "end_turn" if decision.text is not None else "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": _tokens(body),
            "output_tokens": 12,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


# --- The providers' errors, in their own shapes ------------------------------------------------


def openai_error(status: int, model: str | None) -> dict[str, Any]:
    errors = {
        401: (
            "Incorrect API key provided: sk-wr***ong. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            None,
            "invalid_api_key",
        ),
        404: (
            f"The model `{model}` does not exist or you do not have access to it.",
            "invalid_request_error",
            None,
            "model_not_found",
        ),
        400: (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 210345 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            "messages",
            "context_length_exceeded",
        ),
        429: (
            f"Rate limit reached for {model} in organization org-fake on requests per min "
            "(RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.",
            "requests",
            None,
            "rate_limit_exceeded",
        ),
    }
    message, kind, param, code = errors[status]
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def anthropic_error(status: int, model: str | None) -> dict[str, Any]:
    errors = {
        401: ("authentication_error", "invalid x-api-key"),
        404: ("not_found_error", f"model: {model}"),
        400: ("invalid_request_error", "prompt is too long: 210345 tokens > 200000 maximum"),
        429: (
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 requests "
            "per minute.",
        ),
    }
    kind, message = errors[status]
    return {"type": "error", "error": {"type": kind, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    provider: FakeProviders
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        fake = self.provider
        with fake._lock:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self._post()
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        model = body.get("model") if isinstance(body, dict) else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake = self.provider
        fake.log(Logged(self.path, model, body, headers))
        n = len(fake.requests)
        anthropic = self.path == ANTHROPIC_PATH
        if self.path not in (*OPENAI_PATHS, ANTHROPIC_PATH):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        error = anthropic_error if anthropic else openai_error
        # Anthropic takes `x-api-key` (older SDKs) or a Bearer token (recent ones); OpenAI a
        # Bearer token.
        key_ok = headers.get("authorization") == f"Bearer {fake.api_key}" or (
            anthropic and headers.get("x-api-key") == fake.api_key
        )
        if not key_ok:
            self._json(401, error(401, model))
            return
        if not isinstance(body, dict) or not isinstance(model, str):
            self._json(400, {"error": {"message": "the body must be a JSON object with a model"}})
            return
        if not model.startswith("scripted"):
            self._json(404, error(404, model))
            return
        if model == "scripted-too-long":
            self._json(400, error(400, model))
            return
        if model == "scripted-rate-limited":
            self._json(429, error(429, model), {"retry-after-ms": "1"})
            return
        if model == "scripted-drop":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if model == "scripted-not-json":
            self._raw(200, b"<html>Bad gateway, but 200</html>")
            return
        if model == "scripted-wrong-shape":
            self._json(200, {"result": "no choices, no output, no content here"})
            return
        if model == "scripted-slow":
            time.sleep(fake.slow_seconds)
        if model == "scripted-hold":
            fake.hold()
        if self.path == "/v1/chat/completions":
            self._json(200, chat_answer(body, n))
        elif self.path == "/v1/responses":
            self._json(200, responses_answer(body, n))
        else:
            self._json(200, anthropic_answer(body, n))

    def _json(self, status: int, document: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(document).encode(), headers)

    def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            self.close_connection = True
