"""A recording OTLP proxy, and the re-sending of what it recorded one item per request
(issue 21, item 4).

`RecordingProxy(target)` listens on 127.0.0.1 and forwards every POST (path, headers, body) to
`target`, keeping each request's path, content type and body and answering with the target's
answer: the producer's exporter sees Toolscope. `split_newest_first(captured)` turns the
recorded export requests into one request per span or log record, newest first (by start or
record time, then the later sent first), in the encoding they came in; sending that twice to a
fresh project must end in the same state as the producer's own batching.
"""

from __future__ import annotations

import gzip
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.otlp_support import logs_json, logs_protobuf, traces_json, traces_protobuf
from webapp.ingest.otlp import json_reader, protobuf_reader


@dataclass
class Captured:
    path: str
    content_type: str
    body: bytes

    @property
    def signal(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]  # traces, logs, metrics

    @property
    def is_json(self) -> bool:
        return "json" in self.content_type


class RecordingProxy:
    """Forwards OTLP/HTTP requests to `target` and records them (thread-safe)."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.requests: list[Captured] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self._body()
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                plain = gzip.decompress(body) if encoding == "gzip" else body
                content_type = self.headers.get("Content-Type") or ""
                with proxy._lock:
                    proxy.requests.append(Captured(self.path, content_type, plain))
                forward = urllib.request.Request(
                    proxy.target + self.path,
                    data=body,
                    method="POST",
                    headers={
                        k: v
                        for k, v in self.headers.items()
                        if k.lower()
                        not in ("host", "content-length", "connection", "transfer-encoding")
                    },
                )
                try:
                    with urllib.request.urlopen(forward, timeout=60) as answer:
                        status, data = answer.status, answer.read()
                        answer_type = answer.headers.get("Content-Type") or ""
                except urllib.error.HTTPError as error:
                    status, data = error.code, error.read()
                    answer_type = error.headers.get("Content-Type") or ""
                self.send_response(status)
                self.send_header("Content-Type", answer_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                """The request body, sent with a length or chunked (Node's exporters)."""
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def split_newest_first(captured: list[Captured]) -> list[tuple[str, str, bytes]]:
    """(path, content type, body) of one request per span or log record of the captured
    traces and logs requests, newest first."""
    items: list[tuple[int, int, str, str, bytes]] = []
    for request in captured:
        if request.signal not in ("traces", "logs"):
            continue
        reader = json_reader if request.is_json else protobuf_reader
        if request.signal == "traces":
            encode = traces_json if request.is_json else traces_protobuf
            for span in reader.decode_traces(request.body).spans:
                item = (span.start_ns, len(items), request.path, request.content_type)
                items.append((*item, encode([span])))
        else:
            encode = logs_json if request.is_json else logs_protobuf
            for log in reader.decode_logs(request.body).logs:
                item = (log.time_ns, len(items), request.path, request.content_type)
                items.append((*item, encode([log])))
    # Newest first: by time, and of items sent with the same time, the one sent later first.
    items.sort(key=lambda item: (item[0], item[1]), reverse=True)
    return [(path, content_type, body) for _, _, path, content_type, body in items]
