"""A stand-in for the OpenAI Chat Completions API, on the standard library only.

The first request of a conversation (no tool results yet) is answered with two parallel tool
calls, `get_weather` and `get_time`; a request that carries tool results is answered with text.
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


def answer(body: dict[str, Any], counter: int) -> dict[str, Any]:
    """The chat completion for one request body."""
    messages = body.get("messages") or []
    has_results = any(m.get("role") == "tool" for m in messages)
    model = body.get("model") or "gpt-4o-mini"
    if has_results:
        message: dict[str, Any] = {"role": "assistant", "content": FINAL_TEXT}
        finish, usage = "stop", USAGE_SECOND
    else:
        message = {"role": "assistant", "content": None, "tool_calls": _tool_calls(counter)}
        finish, usage = "tool_calls", USAGE_FIRST
    return {
        "id": f"chatcmpl-{counter}",
        "object": "chat.completion",
        "created": 1_760_000_000 + counter,
        "model": f"{model}-2024-07-18" if model == "gpt-4o-mini" else model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
        "system_fingerprint": "fp_fake",
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
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(200, answer(body, counter))

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
