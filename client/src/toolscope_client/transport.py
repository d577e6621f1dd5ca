"""HTTP to one Toolscope server: the session and headers, retries with backoff, and what each
answer means (a result, a failure worth retrying, or a refusal)."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import requests

from ._version import API_VERSION, __version__
from .errors import ToolscopeRequestError, Transient

API_PREFIX = f"/api/v{API_VERSION}"
USER_AGENT = f"toolscope-client/{__version__}"
# A 429's Retry-After is honoured, but never beyond this: the agent is waiting.
MAX_RETRY_AFTER_SECONDS = 5.0


def api_base(base_url: str) -> str:
    """Accept both the server root and the API root (`.../api/v1`), as unique_sdk users have."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    base = base_url.rstrip("/")
    return base if base.endswith(API_PREFIX) else base + API_PREFIX


def segment(value: str | int) -> str:
    """A URL path segment: agent ids may contain '/', '?', spaces..."""
    return quote(str(value), safe="")


@dataclass
class Request:
    """One API request, its body already encoded (the outage buffer is bounded in bytes too).

    `answer` is filled in when a buffered request is finally delivered."""

    method: str
    path: str
    body: bytes = b""
    params: Mapping[str, str] | None = None
    answer: Any = None

    @property
    def size(self) -> int:
        return len(self.body)


class Transport:
    """Sends requests to one Toolscope API with the key; thread-safe like `requests.Session`."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        session: requests.Session | None = None,
    ):
        self.api_base = api_base(base_url)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._session = session or requests.Session()
        self._owns_session = session is None
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }

    def close(self) -> None:
        if self._owns_session:
            self._session.close()

    def send(self, request: Request, retries: int | None = None) -> Any:
        """The decoded answer, after up to `retries` retries (default: the client's).

        Raises `Transient` when every attempt failed in a way worth retrying, and
        `ToolscopeRequestError` at once on a 4xx other than 429."""
        retries = self.retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return self._attempt(request)
            except Transient as exc:
                if attempt == retries:
                    raise
                time.sleep(self._delay(attempt, exc.retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def describe(self, request: Request) -> str:
        return f"{request.method} {self.api_base}{request.path}"

    def _attempt(self, request: Request) -> Any:
        try:
            response = self._session.request(
                request.method,
                self.api_base + request.path,
                data=request.body or None,
                params=request.params,
                headers=self._headers,
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            # requests' messages nest urllib3's; the innermost cause is the readable part.
            cause = exc.__context__ or exc
            raise Transient(f"{type(exc).__name__}: {str(cause)[-200:]}") from None
        status = response.status_code
        if status == 429 or status >= 500:
            raise Transient(f"HTTP {status}", _retry_after(response))
        body = _json_or_text(response)
        if status >= 400:
            raise ToolscopeRequestError(status, body, request.method, request.path)
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_SECONDS)
        # Full jitter: many agents retrying after the same blip do not return in lockstep.
        return self.backoff * (2**attempt) * (0.5 + random.random() / 2)


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
