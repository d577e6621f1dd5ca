"""The receiver's one entry point: `receive`, an export request's body in, what to answer out.

The OTLP/HTTP route (`webapp.api.otlp`) is transport only, as the Collector's receiver is: the
key, the content type, reading and decompressing the body, and encoding the answer. What it
hands over goes through, in order:
1. decoding (`batch.decode`; a `DecodeError` is a 400); a span or log record that cannot be
   stored as sent is rejected alone, and what was repaired is a warning
   (docs/otlp-mapping.md, 'Decoding'); metrics are only checked to be an export request, then
   dropped (not stored);
2. normalization, redaction and the storage limits (`batch.prepare_spans` / `prepare_logs`,
   then `bounds.bound_batch`; one query: the project's rules), outside the write lock;
3. `store.prepare_export`: the component the rows touch is read and projected, the writes
   planned, still outside the lock;
4. the write, `store.write_export` as a `Write` run by `run_write`: a lost race runs again, a
   busy database is a 503.
Each failure the client should see as an OTLP status is an `OtlpError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError as ProtobufDecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

from ...db import db, utcnow
from ...errors import ApiError
from ..transaction import Write, run_write
from ..writes import load_rules
from .batch import Batch, decode, prepare_logs, prepare_spans
from .bounds import Limits, bound_batch
from .projection import Options
from .records import DecodeError
from .store import StoreContext, StoreResult, prepare_export, write_export
from .wire import parse


class OtlpError(Exception):
    """An answer other than 200, in the request's encoding: its HTTP status, the message and
    a short code (as `webapp.errors.ApiError`'s)."""

    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


@dataclass(frozen=True)
class ReceiveContext:
    """Who sends (the key's project) and the settings an export is received with."""

    project_id: int
    price_overrides: dict[str, Any] | None
    max_result_bytes: int  # MAX_RESULT_BYTES
    conversation_keys: tuple[str, ...]  # OTLP_CONVERSATION_KEYS
    stitch_window_seconds: int  # OTLP_STITCH_WINDOW_SECONDS
    max_attribute_bytes: int  # OTLP_MAX_ATTRIBUTE_BYTES
    max_raw_span_bytes: int  # OTLP_MAX_RAW_SPAN_BYTES


@dataclass(frozen=True)
class Receipt:
    """What a stored export answers: items rejected, and a message when something was rejected
    or deserves a warning (the route's `partialSuccess`)."""

    rejected: int = 0
    message: str = ""


def receive(signal: str, encoding: str, body: bytes, context: ReceiveContext) -> Receipt:
    """Decode, normalize, redact and store one export request of `signal` ("traces", "logs"
    or "metrics") in `encoding` ("protobuf" or "json"); all or nothing.

    Raises `OtlpError` (400 not an export request, 503 busy). The request's transactions end
    here: committed on success; on an error the caller rolls back."""
    if signal == "metrics":
        _check_metrics(encoding, body)
        db.session.commit()
        return Receipt()  # accepted and dropped (not stored)
    try:
        decoded = decode(signal, encoding, body)
    except DecodeError as exc:
        raise OtlpError(400, str(exc), "malformed") from None
    batch = _prepare(signal, decoded, context)
    # Values repaired while reading (a lone surrogate, an intValue kept as text) are warnings.
    batch.warnings[:0] = decoded.warnings
    ctx = _store_context(context)
    # Reads and CPU work (the projection, token counts, prices) happen before the write
    # lock; the write checks that what was read still holds.
    prepared = prepare_export(ctx, batch)
    db.session.commit()  # ends the read before the write lock is taken
    try:
        result = run_write(Write(write_export, (ctx, prepared)))
    except ApiError as exc:
        raise OtlpError(exc.status, exc.message, exc.code) from None
    return Receipt(batch.rejected, _summary(batch, result))


def _check_metrics(encoding: str, body: bytes) -> None:
    """Metrics are dropped, but only when they are an export request (400 otherwise)."""
    try:
        if encoding == "protobuf":
            parse(metrics_service_pb2.ExportMetricsServiceRequest(), body)
            return
        if isinstance(json.loads(body), dict):
            return
    except (ProtobufDecodeError, RuntimeError, ValueError):
        pass
    raise OtlpError(400, "the body is not an OTLP metrics export request", "malformed")


def _prepare(signal: str, decoded: Any, context: ReceiveContext) -> Batch:
    """Normalize and redact, before the write lock (one query: the project's rules), then cut
    what is stored to its limits (after redaction, which reads the values whole)."""
    rules = load_rules(context.project_id)
    limit = context.max_result_bytes
    if signal == "traces":
        batch = prepare_spans(decoded, rules, limit, context.conversation_keys)
    else:
        batch = prepare_logs(decoded, rules, limit)
    bound_batch(batch, Limits(context.max_attribute_bytes, context.max_raw_span_bytes, limit))
    return batch


def _store_context(context: ReceiveContext) -> StoreContext:
    return StoreContext(
        project_id=context.project_id,
        now=utcnow(),
        max_result_bytes=context.max_result_bytes,
        options=Options(
            stitch_window_seconds=context.stitch_window_seconds,
            conversation_keys=context.conversation_keys,
        ),
        price_overrides=context.price_overrides,
    )


def _summary(batch: Batch, result: StoreResult) -> str:
    messages = [*batch.errors, *result.warnings]  # result.warnings begin with the batch's
    if len(messages) > 5:
        messages = [*messages[:5], f"... and {len(messages) - 5} more"]
    return "; ".join(messages)
