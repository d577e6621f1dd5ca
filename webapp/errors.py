"""JSON errors: one document for the API, the pages' JSON twins and gunicorn's own refusals.

    {"error": {"message": "tools: 51 tools in one request; the limit is 50",
               "type": "invalid_request_error", "code": "invalid", "param": "tools",
               "details": [{"field": "tools", "message": "...", "limit": 50}]}}

It is OpenAI's error object, which most HTTP clients of LLM APIs already read, and the one the
unique_sdk reads: `message`, and `code`, which must be present for the SDK to take the status
from the answer. `details` is ours (every field at fault). The MessageTool endpoints answer the
request errors that the SDK would turn into a bare APIError (409, 413, 415, 422) as 400,
which it raises as InvalidRequestError; `code` still says which.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Flask, Response, g, jsonify, request
from google.rpc.status_pb2 import Status
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


# What the unique_sdk raises as InvalidRequestError is 400 or 404; the other request errors of
# the MessageTool endpoints are answered as 400 (see `answer_as_unique_api`).
_UNIQUE_API_STATUSES = {409: 400, 413: 400, 415: 400, 422: 400}


def answer_as_unique_api() -> None:
    """Called by a MessageTool view: its errors take the statuses the unique_sdk maps."""
    g.unique_api_errors = True


def _first_field(details: Any) -> str | None:
    if isinstance(details, list) and details and isinstance(details[0], dict):
        return details[0].get("field") or None
    return None


def error_response(
    status: int, message: str, details: Any = None, code: str | None = None
) -> Response:
    """The JSON error document as a response; `param` is the field of the first detail."""
    code = code or CODES.get(status, "error")
    if g.get("unique_api_errors"):
        status = _UNIQUE_API_STATUSES.get(status, status)
    body = error_body(status, message, code, param=_first_field(details), details=details)
    response = jsonify(body)
    response.status_code = status
    if status == 503:
        response.headers["Retry-After"] = "1"
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


# The OTLP receiver's paths (webapp.api.otlp): their errors are google.rpc.Status messages.
OTLP_PATH_PREFIXES = ("/v1/", "/api/otlp/v1/")
OTLP_PROTOBUF = "application/x-protobuf"
# gRPC status codes for the `code` of google.rpc.Status, by HTTP status.
GRPC_CODES = {400: 3, 401: 16, 404: 5, 405: 12, 408: 4, 413: 8, 415: 3, 500: 13, 503: 14}


def otlp_status(status: int, message: str, code: str, protobuf: bool) -> Response:
    """An OTLP error answer: a google.rpc.Status, protobuf or JSON (`{"code", "message",
    "error"}`; `code` is the gRPC code, `error` the short code), with `Retry-After` on a 503."""
    grpc_code = GRPC_CODES.get(status, 2)
    if protobuf:
        body = Status(code=grpc_code, message=message).SerializeToString()
        response = Response(body, status, content_type=OTLP_PROTOBUF)
    else:
        payload = {"code": grpc_code, "message": message, "error": code}
        response = Response(json.dumps(payload), status, content_type="application/json")
    if status == 503:
        response.headers["Retry-After"] = "1"
    return response


def _otlp_path() -> bool:
    return request.path.startswith(OTLP_PATH_PREFIXES)


def _otlp_status(status: int, message: str, exc: HTTPException | None = None) -> Response:
    """An error Flask answers on an OTLP path, in the request's encoding (docs/otlp.md)."""
    code = "internal" if status >= 500 else "http_error"
    response = otlp_status(status, message, code, request.mimetype == OTLP_PROTOBUF)
    for name, value in exc.get_headers() if exc is not None else ():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return error_response(exc.status, exc.message, exc.details, exc.code)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        if _otlp_path():
            return _otlp_status(exc.code or 500, exc.description or exc.name, exc)
        if not _wants_json():
            return exc
        status = exc.code or 500
        message = exc.description or exc.name
        if status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"request body is larger than the limit of {limit} bytes"
            return error_response(413, message, [{"message": message, "limit": limit}])
        response = error_response(status, message)
        # The exception's own headers, such as a 405's `Allow`, belong to the answer too.
        for name, value in exc.get_headers():
            if name.lower() != "content-type":
                response.headers[name] = value
        return response

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        # Never leak a traceback to an agent; log it for the operator.
        app.logger.exception("unhandled error on %s %s", request.method, request.path)
        if _otlp_path():
            return _otlp_status(500, "internal error; the server log has the details")
        if not _wants_json():
            return "Internal server error", 500
        return error_response(500, "internal error; the server log has the details")
