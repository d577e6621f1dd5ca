"""What the client raises when asked to (`raise_errors=True`), and its internal retry signal."""

from __future__ import annotations

from typing import Any


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


class Transient(Exception):
    """A failure worth retrying: no connection, a timeout, 5xx or 429. Never leaves the client."""

    def __init__(self, reason: str, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
