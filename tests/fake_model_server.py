"""A tiny fake model provider on loopback for the model connections' Test button: `GET
/v1/models` in OpenAI's shape, or in Anthropic's when the request carries `anthropic-version`
(the Anthropic SDK's base URL has no `/v1`, OpenAI's has). `fail_with` makes it answer an error
in the provider's shape whose message echoes the key it was sent, as a careless gateway might:
the caller must take it out. Every request's headers are kept in `seen`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeModelServer:
    url: str = ""
    fail_with: int | None = None
    seen: list[dict[str, str]] = field(default_factory=list)

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url


def _key_of(headers: dict[str, str]) -> str:
    bearer = headers.get("authorization", "")
    return headers.get("x-api-key") or bearer.removeprefix("Bearer ")


def _handler(state: FakeModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:  # quiet
            pass

        def _answer(self, status: int, document: dict[str, Any]) -> None:
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.seen.append(headers)
            anthropic = "anthropic-version" in headers
            if self.path.split("?")[0] != "/v1/models":
                self._answer(404, {"error": {"message": f"no route {self.path}"}})
                return
            if state.fail_with is not None:
                message = f"Incorrect API key provided: {_key_of(headers)}"
                if anthropic:
                    document = {
                        "type": "error",
                        "error": {"type": "authentication_error", "message": message},
                    }
                else:
                    document = {
                        "error": {
                            "message": message,
                            "type": "invalid_request_error",
                            "code": "invalid_api_key",
                            "param": None,
                        }
                    }
                self._answer(state.fail_with, document)
                return
            if anthropic:
                self._answer(
                    200,
                    {
                        "data": [
                            {
                                "id": "claude-fake-1",
                                "type": "model",
                                "display_name": "Claude Fake",
                                "created_at": "2025-01-01T00:00:00Z",
                            }
                        ],
                        "has_more": False,
                        "first_id": "claude-fake-1",
                        "last_id": "claude-fake-1",
                    },
                )
            else:
                self._answer(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {"id": m, "object": "model", "created": 0, "owned_by": "fake"}
                            for m in ("gpt-fake-1", "gpt-fake-2")
                        ],
                    },
                )

    return Handler


@contextmanager
def fake_model_server() -> Iterator[FakeModelServer]:
    state = FakeModelServer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()
