"""The OTLP/HTTP receiver: `POST /v1/traces`, `/v1/logs` and `/v1/metrics`, also under
`/api/otlp/v1/...` for deployments that proxy only `/api` (docs/otlp.md).

This module is transport only, as the Collector's receiver is; each failure is answered in
OTLP's own way (a `google.rpc.Status` in the request's encoding, never a 500, never a partial
write):
1. the Bearer key (401), before the body is read;
2. the content type (415) and encoding (415);
3. the body, read to its end even when chunked, and decompressed, each capped at
   TOOLSCOPE_OTLP_MAX_BODY_BYTES (413);
4. everything else is `ingest.otlp.receiver.receive`: decoding (400), normalization and
   redaction outside the write lock, then the write transaction (raw rows and the projection):
   a lost race runs again, a busy database answers 503, here with `Retry-After`.
Success is 200 with an empty `Export*ServiceResponse`, or with `partialSuccess` when items were
rejected or something deserves a warning (a span re-sent with other content, a cut result).
Anything unforeseen is still a Status (500, gRPC INTERNAL), and so are the errors Flask answers
on these paths itself (a 405, a body deadline): `webapp.errors.otlp_status`.
"""

from __future__ import annotations

import json
import logging
import zlib
from typing import Any

from flask import Response, current_app, g, request
from flask_openapi3 import APIBlueprint
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from werkzeug.exceptions import RequestEntityTooLarge

from ..auth import authenticate_api_key
from ..db import db
from ..errors import ApiError, otlp_status
from ..ingest.otlp.receiver import OtlpError, Receipt, ReceiveContext, receive

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
SIGNALS = ("traces", "logs", "metrics")

logger = logging.getLogger(__name__)

_RESPONSES = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "logs": logs_service_pb2.ExportLogsServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
}


def _encoding() -> str:
    mimetype = request.mimetype
    if mimetype == PROTOBUF:
        return "protobuf"
    if mimetype == JSON:
        return "json"
    raise OtlpError(
        415,
        f"unsupported content type {mimetype or 'none'!r}; send {PROTOBUF} or {JSON}",
        "unsupported_media_type",
    )


def _too_large(limit: int) -> OtlpError:
    return OtlpError(413, f"the export is larger than the limit of {limit} bytes", "too_large")


def _read_body(limit: int) -> bytes:
    """The whole body, chunked or not, refused past `limit` bytes."""
    # werkzeug refuses a larger Content-Length at once, but silently cuts a chunked body at
    # its limit: allow one byte more, so reaching past `limit` is seen.
    request.max_content_length = limit + 1
    try:
        data = request.stream.read(limit + 1)
    except RequestEntityTooLarge:
        raise _too_large(limit) from None
    if len(data) > limit:
        raise _too_large(limit)
    return data


def _decompress(data: bytes, limit: int) -> bytes:
    encoding = (request.headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding == "identity":
        return data
    if encoding not in ("gzip", "deflate"):
        raise OtlpError(
            415,
            f"unsupported content encoding {encoding!r}; send gzip or none",
            "unsupported_media_type",
        )
    # gzip, or deflate in its zlib wrapper (32 + MAX_WBITS detects either header).
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else 32 + zlib.MAX_WBITS
    out = bytearray()
    while data:
        inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(data, limit + 1 - len(out))
        except zlib.error as exc:
            raise OtlpError(
                400, f"the {encoding} body cannot be decompressed: {exc}", "malformed"
            ) from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise _too_large(limit)
        if not inflater.eof:
            raise OtlpError(400, f"the {encoding} body is truncated", "malformed")
        data = inflater.unused_data  # gzip allows several members one after another
    return bytes(out)


def _answer(signal: str, encoding: str, receipt: Receipt) -> Response:
    rejected, message = receipt.rejected, receipt.message
    response = _RESPONSES[signal]()
    if rejected or message:
        partial_success = response.partial_success
        if signal == "traces":
            partial_success.rejected_spans = rejected
        elif signal == "logs":
            partial_success.rejected_log_records = rejected
        partial_success.error_message = message
    if encoding == "protobuf":
        return Response(response.SerializeToString(), 200, content_type=PROTOBUF)
    body: dict[str, Any] = {}
    if rejected or message:
        field = {"traces": "rejectedSpans", "logs": "rejectedLogRecords"}.get(signal)
        body["partialSuccess"] = {"errorMessage": message}
        if field:
            body["partialSuccess"][field] = str(rejected)
    return Response(json.dumps(body), 200, content_type=JSON)


def _error(exc: OtlpError, encoding: str) -> Response:
    return otlp_status(exc.status, exc.message, exc.code, encoding == "protobuf")


def export(signal: str) -> Response:
    # Errors answer in the request's encoding; anything but protobuf is answered in JSON.
    encoding = "protobuf" if request.mimetype == PROTOBUF else "json"
    try:
        try:
            authenticate_api_key()
        except ApiError as exc:
            raise OtlpError(exc.status, exc.message, exc.code) from None
        encoding = _encoding()
        limit = current_app.config["OTLP_MAX_BODY_BYTES"]
        body = _decompress(_read_body(limit), limit)
        receipt = receive(signal, encoding, body, _context())
        return _answer(signal, encoding, receipt)
    except OtlpError as exc:
        db.session.rollback()
        return _error(exc, encoding)
    except Exception:
        # A fault of ours, not the exporter's: logged, and answered as OTLP answers (never the
        # HTML error page).
        logger.exception("OTLP %s export failed", signal)
        db.session.rollback()
        message = "internal error; the server log has the details"
        return _error(OtlpError(500, message, "internal"), encoding)


def _context() -> ReceiveContext:
    """The key's project and the settings its exports are received with."""
    config = current_app.config
    return ReceiveContext(
        project_id=g.project.id,
        price_overrides=g.project.price_overrides,
        max_result_bytes=config["MAX_RESULT_BYTES"],
        conversation_keys=tuple(config["OTLP_CONVERSATION_KEYS"]),
        stitch_window_seconds=config["OTLP_STITCH_WINDOW_SECONDS"],
        max_attribute_bytes=config["OTLP_MAX_ATTRIBUTE_BYTES"],
        max_raw_span_bytes=config["OTLP_MAX_RAW_SPAN_BYTES"],
    )


# --- Routes -----------------------------------------------------------------------------------

_BODY_DOC = {
    "required": True,
    "description": "An OTLP Export*ServiceRequest (https://opentelemetry.io/docs/specs/otlp/), "
    "binary protobuf or OTLP/JSON, optionally gzip-compressed. Not modelled here.",
    "content": {
        PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
        JSON: {"schema": {"type": "object"}},
    },
}


def _answer_doc(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
            JSON: {"schema": {"type": "object"}},
        },
    }


_RESPONSES_DOC = {
    200: _answer_doc("Export*ServiceResponse, with partialSuccess when items were rejected"),
    400: _answer_doc("google.rpc.Status: the body is not an OTLP export request"),
    401: _answer_doc("google.rpc.Status: missing, unknown or revoked key"),
    413: _answer_doc("google.rpc.Status: over TOOLSCOPE_OTLP_MAX_BODY_BYTES"),
    415: _answer_doc("google.rpc.Status: another content type or content encoding"),
    503: _answer_doc("google.rpc.Status: the database is busy; retry after Retry-After"),
}


def _route(bp: APIBlueprint, path: str, signal: str, alias: bool) -> None:
    def view() -> Response:
        return export(signal)

    view.__name__ = f"otlp_{signal}{'_alias' if alias else ''}"
    view.__doc__ = f"OTLP/HTTP {signal} export" + (
        " (accepted and dropped: metrics are not stored)" if signal == "metrics" else ""
    )
    view.__delay_validate_request__ = True  # type: ignore[attr-defined]
    bp.post(
        path,
        summary=view.__doc__,
        openapi_extensions={"requestBody": _BODY_DOC},
        responses=_RESPONSES_DOC,
    )(view)


# Outside /api/v1: OTLP exporters append /v1/traces to the endpoint they are given.
bp = APIBlueprint("otlp", __name__, abp_security=[{"bearer": []}])
for _signal in SIGNALS:
    _route(bp, f"/v1/{_signal}", _signal, alias=False)
    _route(bp, f"/api/otlp/v1/{_signal}", _signal, alias=True)
