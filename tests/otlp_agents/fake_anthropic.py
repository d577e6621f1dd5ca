"""A stand-in for the Anthropic Messages API (`POST /v1/messages`), on the standard library only,
streaming (server-sent events, as the API sends them) and not.

It plays the framework scenario of issue 21, as `fake_openai.py` does: the first prompt is
answered with two parallel `tool_use` blocks, `get_weather` and `get_time`; a request whose
messages after the last user prompt carry `tool_result` blocks is answered with text; a
follow-up prompt naming FOLLOW_UP_CITY gets one `get_weather` call, then FOLLOW_UP_TEXT.
Every request body is kept, so a test can compare Toolscope's replay with what the agent sent.
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.otlp_agents.fake_openai import (
    FINAL_TEXT,
    FOLLOW_UP_CITY,
    FOLLOW_UP_TEXT,
    USAGE_FIRST,
    USAGE_FOURTH,
    USAGE_SECOND,
    USAGE_THIRD,
)

MODEL = "claude-sonnet-4-5"
# Each server numbers its answers from its own base, so two servers of one test never give the
# same tool_use or message id (a real API never does: one project's agents do not share ids).
_BASES = itertools.count(0, 1000)


def _is_prompt(message: dict[str, Any]) -> bool:
    """A user message with something besides tool results."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if isinstance(content, str):
        return True
    return any(not (isinstance(b, dict) and b.get("type") == "tool_result") for b in content or [])


def _prompt_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def tool_use_id(name: str, counter: int) -> str:
    return f"toolu_{name.split('_')[-1]}_{counter}"


def reply(body: dict[str, Any], counter: int) -> tuple[list[dict[str, Any]], str, dict]:
    """(content blocks, stop reason, usage) of the answer to one request body."""
    messages = body.get("messages") or []
    last = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=-1)
    follow_up = last >= 0 and FOLLOW_UP_CITY in _prompt_text(messages[last])
    has_results = any(
        isinstance(b, dict) and b.get("type") == "tool_result"
        for m in messages[last + 1 :]
        if isinstance(m.get("content"), list)
        for b in m["content"]
    )
    if has_results:
        text, usage = (FOLLOW_UP_TEXT, USAGE_FOURTH) if follow_up else (FINAL_TEXT, USAGE_SECOND)
        return [{"type": "text", "text": text}], "end_turn", usage
    if follow_up:
        calls = [("get_weather", FOLLOW_UP_CITY)]
        usage = USAGE_THIRD
    else:
        calls = [("get_weather", "Paris"), ("get_time", "Paris")]
        usage = USAGE_FIRST
    blocks = [
        {"type": "tool_use", "id": tool_use_id(name, counter), "name": name, "input": {"city": c}}
        for name, c in calls
    ]
    return blocks, "tool_use", usage


def _usage(usage: dict[str, int], output: int | None = None) -> dict[str, Any]:
    return {
        "input_tokens": usage["prompt_tokens"],
        "output_tokens": usage["completion_tokens"] if output is None else output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def answer(body: dict[str, Any], counter: int) -> dict[str, Any]:
    """The Message object for one request body (not streamed)."""
    blocks, stop, usage = reply(body, counter)
    return {
        "id": f"msg_fake_{counter:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model") or MODEL,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _usage(usage),
    }


def stream_events(body: dict[str, Any], counter: int) -> list[tuple[str, dict[str, Any]]]:
    """The server-sent events of the same answer, streamed: message_start, a start, deltas and
    a stop per content block (text in two pieces, tool input as partial JSON), message_delta
    with the stop reason and the output tokens, message_stop."""
    message = answer(body, counter)
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            empty = {"type": "text", "text": ""}
            text = block["text"]
            cut = len(text) // 2
            deltas = [{"type": "text_delta", "text": piece} for piece in (text[:cut], text[cut:])]
        else:
            empty = {**block, "input": {}}
            encoded = json.dumps(block["input"])
            cut = len(encoded) // 2
            deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in ("", encoded[:cut], encoded[cut:])
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": empty},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


class FakeAnthropic:
    """The server on 127.0.0.1 and an ephemeral port, in a daemon thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.base = next(_BASES)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append({"path": self.path, "body": body})
                    counter = fake.base + len(fake.requests)
                if not self.path.split("?")[0].rstrip("/").endswith("/v1/messages"):
                    error = {"type": "not_found_error", "message": f"no route {self.path}"}
                    self._send(404, {"type": "error", "error": error})
                    return
                if body.get("stream"):
                    self._stream(stream_events(body, counter), counter)
                else:
                    self._send(200, answer(body, counter), counter)

            def _headers(self, counter: int) -> None:
                self.send_header("request-id", f"req_fake_{counter:04d}")
                self.send_header("anthropic-organization-id", "fake-org")

            def _send(self, status: int, payload: dict[str, Any], counter: int = 0) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self._headers(counter)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, events: list[tuple[str, dict[str, Any]]], counter: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self._headers(counter)
                self.end_headers()
                for name, data in events:
                    self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
