"""Calls to model providers: one request body sent through the provider's official SDK, its raw
answer back (docs/runs.md, 'Runs').

Only the SDKs talk to a provider (``openai.OpenAI`` for the ``openai`` kind: Chat Completions
and Responses, at any OpenAI-compatible base URL; ``anthropic.Anthropic`` for Messages), with an
explicit timeout and the SDK's own retries (429 and 5xx answers, dropped connections). The
body, already in the API's shape, goes through the client's ``post`` at the format's path
rather than ``create``, which would first re-type it (:func:`_call` says why). The answer is
the provider's JSON as it came (the raw HTTP answer), so what a run stores is what the
provider said, not what this SDK version's types kept of it.

Every failure is a :class:`ProviderError` with the HTTP status when there was one, a ``kind``
and a message for people (the provider's own message when it gave one: "context too long" says
what it says). No message ever contains the connection's key: the SDK does not put it in its
errors, and :func:`send` scrubs it from every message it makes anyway.

A network wait happens here and only here: callers (``services.model_runs``) call :func:`send`
outside any database transaction and outside ``gc_paused``.
"""

from __future__ import annotations

import importlib
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from flask import current_app

from ..replay.next_action import MalformedAnswer, NextAction, parse_answer
from .model_connections import make_client, scrub

# The scripted demo model (``replay.scripted_model``), served by the app itself in DEV mode at
# /dev/scripted-model/v1: connections name it by this base URL, which providers reach in
# process (:func:`_in_process`), never over the network.
SCRIPTED_HOST = "scripted-model.invalid"
SCRIPTED_BASE_URL = f"http://{SCRIPTED_HOST}/dev/scripted-model/v1"

# The formats each connection kind can take.
KIND_FORMATS = {
    "openai": ("openai-chat", "openai-responses"),
    "anthropic": ("anthropic",),
}

# ProviderError.kind, by what went wrong.
AUTH = "auth"  # 401, 403: the key (or its rights)
MODEL_NOT_FOUND = "model_not_found"  # 404: the model (or the base URL's path)
BAD_REQUEST = "bad_request"  # 400, 413, 422: e.g. the context is too long for the model
RATE_LIMITED = "rate_limited"  # 429, after the SDK's own retries
SERVER_ERROR = "server_error"  # 5xx, after the SDK's own retries
HTTP_ERROR = "http_error"  # another status
TIMEOUT = "timeout"
CONNECTION = "connection"  # refused, dropped, DNS, TLS
MALFORMED_ANSWER = "malformed_answer"  # not JSON, or not the format's shape
KINDS = (
    AUTH,
    MODEL_NOT_FOUND,
    BAD_REQUEST,
    RATE_LIMITED,
    SERVER_ERROR,
    HTTP_ERROR,
    TIMEOUT,
    CONNECTION,
    MALFORMED_ANSWER,
)

# A provider's message is kept, up to this many characters.
MAX_MESSAGE_CHARS = 2000


class ProviderError(Exception):
    """A request that got no usable answer: ``status`` (the HTTP status, None without an
    answer), ``kind`` (one of :data:`KINDS`) and ``message`` (for people, never a secret)."""

    def __init__(self, status: int | None, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.status = status
        self.kind = kind
        self.message = message


class FormatMismatch(ValueError):
    """A replay format the connection's kind does not take (an Anthropic payload for an
    OpenAI connection)."""


@dataclass(frozen=True)
class ProviderAnswer:
    """The provider's answer as it came (a JSON object), what it says the model does next, and
    how long the call took (the SDK's retries included)."""

    answer: dict[str, Any]
    next_action: NextAction
    latency_ms: int


def check_format(kind: str, fmt: str) -> None:
    """Raise :class:`FormatMismatch` when a connection of ``kind`` cannot take ``fmt``."""
    formats = KIND_FORMATS.get(kind, ())
    if fmt not in formats:
        takes = " or ".join(formats) or "no format"
        raise FormatMismatch(f"a {kind} connection takes {takes}, not {fmt}")


def send(
    connection: Any,
    fmt: str,
    body: dict[str, Any],
    *,
    timeout: float,
    max_retries: int,
) -> ProviderAnswer:
    """Send ``body`` (the keyword arguments of the SDK's ``create``) to ``connection`` (a
    ``services.model_connections.ResolvedConnection``) in ``fmt``; the answer or a
    :class:`ProviderError`."""
    check_format(connection.kind, fmt)
    openai, anthropic = _sdks()
    secret = connection  # what _scrub takes out of every message
    started = time.monotonic()
    try:
        raw = _call(connection, fmt, body, timeout=timeout, max_retries=max_retries)
        status = raw.status_code
        content = raw.content
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        raise _status_error(exc.status_code, exc.body, exc.message, secret) from None
    except (openai.APITimeoutError, anthropic.APITimeoutError):
        raise ProviderError(
            None, TIMEOUT, f"no answer within {timeout:g} s (the SDK retried {max_retries}x)"
        ) from None
    except (openai.APIConnectionError, anthropic.APIConnectionError) as exc:
        cause = _root_cause(exc)
        raise ProviderError(
            None, CONNECTION, _scrub(f"could not reach {connection.base_url}: {cause}", secret)
        ) from None
    except (openai.APIResponseValidationError, anthropic.APIResponseValidationError) as exc:
        raise ProviderError(
            exc.status_code, MALFORMED_ANSWER, _scrub(exc.message, secret)
        ) from None
    latency_ms = round((time.monotonic() - started) * 1000)
    try:
        answer = json.loads(content)
    except ValueError:
        snippet = content[:200].decode("utf-8", "replace")
        raise ProviderError(
            status, MALFORMED_ANSWER, _scrub(f"the answer is not JSON: {snippet!r}", secret)
        ) from None
    if not isinstance(answer, dict):
        raise ProviderError(
            status, MALFORMED_ANSWER, f"the answer is JSON, not an object: {type(answer).__name__}"
        )
    try:
        next_action = parse_answer(fmt, answer)
    except MalformedAnswer as exc:
        raise ProviderError(status, MALFORMED_ANSWER, _scrub(str(exc), secret)) from None
    return ProviderAnswer(answer, next_action, latency_ms)


def _call(
    connection: Any, fmt: str, body: dict[str, Any], *, timeout: float, max_retries: int
) -> Any:
    """The SDK's raw HTTP answer (``httpx.Response``) to ``body`` POSTed at the format's path;
    status errors, timeouts and connection errors are raised by the SDK after its retries."""
    # The connection's SDK client (``openai.OpenAI`` / ``anthropic.Anthropic`` with the
    # timeout, the retries, the key and headers, redirects not followed).
    client = make_client(connection, timeout=timeout, max_retries=max_retries)
    client = _in_process(connection, client)
    path, options = _ENDPOINTS[fmt]
    with client:
        # The client's own `post` (the SDKs' documented way to send a body they need not
        # type), not `create`: the body is already the API's JSON, and `openai`'s `create`
        # walks it through its TypedDicts first (`maybe_transform`: ~9,300 calls, 200+ ms for
        # a 200-call conversation's messages, most of a run's time; docs/benchmark.md,
        # 'Runs and studies') only to send the same JSON. Everything else `create` does is
        # the client's and stays: auth headers, the idempotency key kept across retries, the
        # retries with their back-off, the timeout, the status errors. `cast_to` the HTTP
        # library's Response: the answer as it came, parsed by `parse_answer`.
        return client.post(
            path, body=body, cast_to=_http_library(connection.kind).Response, options=options
        )


# Each format's path under the base URL and the request options its `create` gives
# (`openai`: the key as a bearer token, not an admin key; Anthropic's `messages.create`
# passes only tracing names besides the timeout, which the client already has).
_ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {
    "openai-chat": ("/chat/completions", {"security": {"bearer_auth": True}}),
    "openai-responses": ("/responses", {"security": {"bearer_auth": True}}),
    "anthropic": ("/v1/messages", {}),
}


def _sdks() -> tuple[Any, Any]:
    """The ``openai`` and ``anthropic`` modules, imported on the first run sent, not with this
    module: together they cost ~1.5 s of CPU, which a server (or its token pass process, where
    the run worker lives) would otherwise pay as it starts, just as agents' first writes
    arrive, whether or not anyone ever sends a run. Importing them then at a low priority
    instead starved the import on a busy machine, and the run worker with it (a run waited
    minutes to be sent)."""
    import anthropic
    import openai

    return openai, anthropic


def _default_http_client(kind: str) -> Any:
    """The SDK's ``DefaultHttpxClient`` for the connection ``kind``."""
    openai, anthropic = _sdks()
    return anthropic.DefaultHttpxClient if kind == "anthropic" else openai.DefaultHttpxClient


def _http_library(kind: str) -> Any:
    """The HTTP library the connection kind's SDK is built on (httpx, or a fork of it): the
    module of the class its ``DefaultHttpxClient`` extends."""
    make = _default_http_client(kind)
    return importlib.import_module(make.__mro__[1].__module__.partition(".")[0])


def scripted_host(base_url: str) -> bool:
    """Whether ``base_url`` names the scripted demo model (:data:`SCRIPTED_BASE_URL`)."""
    return urlsplit(base_url).hostname == SCRIPTED_HOST


def _in_process(connection: Any, client: Any) -> Any:
    """In DEV mode, a connection to :data:`SCRIPTED_BASE_URL` reaches this app itself through
    an in-process WSGI transport (the SDK, its request and its answer are real; no socket, so
    no host or port to know, wherever the worker runs). Outside DEV the host, under the
    reserved ``.invalid`` domain, is never looked up: the run fails with a connection error
    that says so."""
    if not scripted_host(connection.base_url):
        return client
    if not current_app.config.get("DEV"):
        raise ProviderError(
            None,
            CONNECTION,
            "the scripted demo model is served only in DEV mode (TOOLSCOPE_DEV=1); this server "
            "is not in DEV mode",
        )
    make = _default_http_client(connection.kind)
    transport = _http_library(connection.kind).WSGITransport(app=current_app._get_current_object())
    return client.with_options(http_client=make(transport=transport, follow_redirects=False))


def _status_error(status: int, body: Any, sdk_message: str, secret: Any) -> ProviderError:
    if status in (401, 403):
        kind = AUTH
    elif status == 404:
        kind = MODEL_NOT_FOUND
    elif status in (400, 413, 422):
        kind = BAD_REQUEST
    elif status == 429:
        kind = RATE_LIMITED
    elif status >= 500:
        kind = SERVER_ERROR
    else:
        kind = HTTP_ERROR
    message = _provider_message(body) or sdk_message or f"HTTP {status}"
    if kind in (RATE_LIMITED, SERVER_ERROR):
        message = f"{message} (after the SDK's retries)"
    return ProviderError(status, kind, _scrub(message, secret))


def _provider_message(body: Any) -> str | None:
    """The provider's own words: OpenAI's ``{"error": {"message"}}`` (the SDK hands over the
    inner object), Anthropic's ``{"type": "error", "error": {"type", "message"}}``, or a
    gateway's ``{"message"}`` / ``{"detail"}`` / plain text."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            for key in ("message", "detail"):
                if isinstance(inner.get(key), str) and inner[key].strip():
                    return inner[key]
        elif isinstance(inner, str) and inner.strip():
            return inner
        if isinstance(body.get("detail"), str):
            return body["detail"]
        return None
    if isinstance(body, str) and body.strip():
        return body.strip()
    return None


def _root_cause(exc: BaseException) -> str:
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    text = str(cause) or type(cause).__name__
    return text if cause is not exc else exc.__class__.__name__ + (f": {exc}" if str(exc) else "")


def _scrub(message: str, connection: Any) -> str:
    """``message`` without the connection's key and header values (also where a gateway
    echoed them), cut to a readable size."""
    message = scrub(message, connection)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "…"
    return message
