"""JSON errors for the API: one shape everywhere, `{"error", "message", "details"}`."""

from __future__ import annotations

from typing import Any

from flask import Flask, Response, jsonify, request
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

API_PREFIX = "/api/"

# Our error codes, by HTTP status.
CODES = {
    400: "malformed",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    500: "internal",
}


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


def _wants_json() -> bool:
    return request.path.startswith(API_PREFIX) or request.path.endswith(".json")


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.message, exc.details, exc.code)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
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
