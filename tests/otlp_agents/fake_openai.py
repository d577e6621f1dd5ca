"""A stand-in for the OpenAI Chat Completions API, on the standard library only.

The first request of a conversation (no tool results yet) is answered with two parallel tool
calls, `get_weather` and `get_time`; a request that carries tool results is answered with text.
A follow-up prompt naming FOLLOW_UP_CITY (the second turn of the framework scenario, issue 21)
is answered with one `get_weather` call for that city, then FOLLOW_UP_TEXT. The Responses API
(`POST /v1/responses`, not streamed) answers the same way with function_call items. Chat
Completions also stream (`"stream": true`: server-sent chunks, usage last when asked for).
Every request body is kept, so a test can compare Toolscope's replay with what the agent sent.
Run it as `python fake_openai.py PORT_FILE` to serve until killed (the port is written to the
file), or use `FakeOpenAI` in-process.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE_FIRST = {"prompt_tokens": 61, "completion_tokens": 42, "total_tokens": 103}
USAGE_SECOND = {"prompt_tokens": 130, "completion_tokens": 17, "total_tokens": 147}
FINAL_TEXT = "In Paris it is sunny, 21 °C, and the local time is 14:05."
# The second turn of the framework scenario (issue 21): the user asks about another city.
FOLLOW_UP_CITY = "Lyon"
FOLLOW_UP_PROMPT = f"And what is the weather in {FOLLOW_UP_CITY}?"
FOLLOW_UP_TEXT = f"In {FOLLOW_UP_CITY} it is sunny too, 21 °C."
USAGE_THIRD = {"prompt_tokens": 170, "completion_tokens": 21, "total_tokens": 191}
USAGE_FOURTH = {"prompt_tokens": 215, "completion_tokens": 14, "total_tokens": 229}


def _tool_calls(counter: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_weather_{counter}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        {
            "id": f"call_time_{counter}",
            "type": "function",
            "function": {"name": "get_time", "arguments": '{"city": "Paris"}'},
        },
    ]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _step(items: list[dict[str, Any]], result_types: tuple[str, ...]) -> tuple[bool, bool]:
    """(follow-up turn?, results since the last user message?) of a request's messages or
    Responses input items."""
    last_user = max((i for i, m in enumerate(items) if m.get("role") == "user"), default=-1)
    prompt = _text(items[last_user].get("content")) if last_user >= 0 else ""
    tail = items[last_user + 1 :]
    has_results = any(m.get("role") == "tool" or m.get("type") in result_types for m in tail)
    return FOLLOW_UP_CITY in prompt, has_results


def _follow_up_calls(counter: int) -> list[dict[str, Any]]:
    arguments = json.dumps({"city": FOLLOW_UP_CITY})
    return [
        {
            "id": f"call_weather_{counter}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }
    ]


def _reply(follow_up: bool, has_results: bool, counter: int) -> tuple[str | None, list, dict]:
    """(text, tool calls, usage) of the model's answer."""
    if has_results:
        return (FOLLOW_UP_TEXT, [], USAGE_FOURTH) if follow_up else (FINAL_TEXT, [], USAGE_SECOND)
    if follow_up:
        return None, _follow_up_calls(counter), USAGE_THIRD
    return None, _tool_calls(counter), USAGE_FIRST


def answer(body: dict[str, Any], counter: int) -> dict[str, Any]:
    """The chat completion for one request body."""
    messages = body.get("messages") or []
    model = body.get("model") or "gpt-4o-mini"
    text, calls, usage = _reply(*_step(messages, ()), counter)
    if calls:
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": text}
        finish = "stop"
    return {
        "id": f"chatcmpl-{counter}",
        "object": "chat.completion",
        "created": 1_760_000_000 + counter,
        "model": f"{model}-2024-07-18" if model == "gpt-4o-mini" else model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
        "system_fingerprint": "fp_fake",
    }


def stream_chunks(completion: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
    """The same completion streamed (`"stream": true`), as the API sends it: a role chunk, the
    text in two pieces or each tool call's id and name then its arguments in two pieces, the
    finish reason, and the usage in a last chunk without choices when the request asked for it
    (`stream_options.include_usage`)."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": None if message.get("tool_calls") else ""})]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        cut = len(arguments) // 2
        head = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {**head, "function": {"name": call["function"]["name"], "arguments": ""}}
                    ]
                }
            )
        )
        for piece in (arguments[:cut], arguments[cut:]):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    if message.get("content"):
        text = message["content"]
        cut = len(text) // 2
        chunks += [chunk({"content": text[:cut]}), chunk({"content": text[cut:]})]
    chunks.append(chunk({}, choice["finish_reason"]))
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


def answer_responses(body: dict[str, Any], counter: int) -> dict[str, Any]:
    """The Responses API answer (`POST /v1/responses`, not streamed) for one request body."""
    items = body.get("input") or []
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    text, calls, usage = _reply(*_step(items, ("function_call_output",)), counter)
    if calls:
        output = [
            {
                "type": "function_call",
                "id": f"fc_{k}_{counter}",
                "call_id": c["id"],
                "name": c["function"]["name"],
                "arguments": c["function"]["arguments"],
                "status": "completed",
            }
            for k, c in enumerate(calls)
        ]
    else:
        output = [
            {
                "type": "message",
                "id": f"msg_{counter}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ]
    return {
        "id": f"resp_{counter}",
        "object": "response",
        "created_at": 1_760_000_000 + counter,
        "status": "completed",
        "model": body.get("model") or "gpt-4o-mini",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "instructions": body.get("instructions"),
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


class FakeOpenAI:
    """The server on 127.0.0.1 and an ephemeral port, in a daemon thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append({"path": self.path, "body": body})
                    counter = len(fake.requests)
                if self.path.rstrip("/").endswith("/responses"):
                    self._send(200, answer_responses(body, counter))
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                if body.get("stream"):
                    self._stream(stream_chunks(answer(body, counter), body))
                    return
                self._send(200, answer(body, counter))

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    with FakeOpenAI() as fake:
        with open(sys.argv[1], "w") as f:
            f.write(str(fake.port))
        threading.Event().wait()
