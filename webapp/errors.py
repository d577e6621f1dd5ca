"""JSON errors for the API: one shape everywhere, `{"error", "message", "details"}`."""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, jsonify, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, RequestTimeout

from .body_deadline import timed_out

API_PREFIX = "/api/"

# Our error codes, by HTTP status.
CODES = {
    400: "malformed",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "timeout",
    409: "conflict",
    413: "too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    417: "expectation_failed",
    422: "invalid",
    431: "headers_too_large",
    500: "internal",
    501: "not_implemented",
    503: "unavailable",
}


# The OpenAI-style `type` of an error, by HTTP status; anything else below 500 is the request's.
TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    if status >= 500:
        return "server_error"
    return TYPES.get(status, "invalid_request_error")


def error_body(
    status: int,
    message: str,
    code: str | None = None,
    *,
    param: str | None = None,
    details: Any = None,
) -> dict[str, Any]:
    """The error document, `{"error": {"message", "type", "code", "param"[, "details"]}}`.

    Built without Flask: gunicorn's worker writes it too, for requests the app never sees."""
    error: dict[str, Any] = {
        "message": message,
        "type": error_type(status),
        "code": code or CODES.get(status, "error"),
        "param": param,
    }
    if details is not None:
        error["details"] = details
    return {"error": error}


class ApiError(Exception):
    """Raised anywhere below a view to answer with a JSON error."""

    def __init__(self, status: int, message: str, details: Any = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details
        self.code = code or CODES.get(status, "error")


def error_response(status: int, message: str, details: Any = None, code: str | None = None):
    body: dict[str, Any] = {"error": code or CODES.get(status, "error"), "message": message}
    if details is not None:
        body["details"] = details
    response = jsonify(body)
    response.status_code = status
    return response


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def validation_details(exc: ValidationError) -> list[dict[str, Any]]:
    """pydantic errors as `{"field": "tools.3.roundIndex", "message": ...}`, inputs left out
    (they may be large or secret)."""
    details = []
    for err in exc.errors(include_url=False, include_input=False):
        item: dict[str, Any] = {"field": _loc(err["loc"]), "message": err["msg"]}
        if err.get("ctx"):
            item["limit"] = {k: str(v) for k, v in err["ctx"].items() if k != "error"}
        details.append(item)
    return details


def validation_error_response(exc: ValidationError) -> Response:
    details = validation_details(exc)
    first = details[0] if details else {"field": "", "message": "invalid"}
    where = f"{first['field']}: " if first["field"] else ""
    return error_response(422, f"{where}{first['message']}", details)


def _body_timeout(seconds: float) -> RequestTimeout:
    return RequestTimeout(f"the request body did not arrive within {seconds:g} seconds")


def _wants_json() -> bool:
    return request.path.startswith(API_PREFIX) or request.path.endswith(".json")


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.message, exc.details, exc.code)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        if timed_out(request.environ):
            exc = _body_timeout(app.config["BODY_TIMEOUT_SECONDS"])
        if not _wants_json():
            return exc
        status = exc.code or 500
        message = exc.description or exc.name
        if status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"request body is larger than the limit of {limit} bytes"
            return error_response(413, message, {"limit": limit})
        return error_response(status, message)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        # Never leak a traceback to an agent; log it for the operator.
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        if not _wants_json():
            return "Internal server error", 500
        return error_response(500, "internal error; the server log has the details")
