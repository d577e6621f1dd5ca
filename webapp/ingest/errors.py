"""The write path's errors: 409 and 422 answers, and the signal to run a request again."""

from __future__ import annotations

from typing import Any

from ..errors import ApiError


class Conflict(ApiError):
    """A resubmission that differs from what is stored (409)."""

    def __init__(self, message: str, details: Any = None):
        super().__init__(409, message, details)


class Invalid(ApiError):
    """Input that cannot be stored as given (422)."""

    def __init__(self, field_path: str, message: str, **extra: Any):
        details = [{"field": field_path, "message": message, **extra}]
        super().__init__(422, f"{field_path}: {message}", details)


class Duplicate(Conflict):
    """The same key twice in one request, for two different things (409): what the second would
    get if it came in a request of its own after the first. No document schema can say that
    ids in a list differ, so a client that follows the OpenAPI document can send it; it is not
    a malformed request (422)."""

    def __init__(self, field_path: str, message: str, duplicate_of: str):
        details = [{"field": field_path, "message": message, "duplicate_of": duplicate_of}]
        super().__init__(f"{field_path}: {message}", details)


class RaceLost(Exception):
    """A concurrent writer inserted one of our keys first; the request should run again."""
