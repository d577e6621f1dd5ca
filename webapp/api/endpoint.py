"""How every API view receives its input, authenticates and runs its transaction.

`@endpoint()` reads the view's annotations (`body`, `query`, `path`: pydantic models), the same
annotations flask-openapi3 reads to write the OpenAPI document, and:

1. authenticates the Bearer key before it reads anything else: a stranger learns nothing (401
   wins over 400/422), and a stranger's slow body never keeps a thread waiting. A key this
   worker has seen comes from its cache (`webapp.auth`), checked against the `api_state`
   version: now (one single-row read), or, for a prepare step, first thing in its write
   transaction; if it changed, the request starts over reading key and rules (the body it
   parsed is kept) and an error found before the check waits for it (a revoked key is a 401);
2. parses the body from the raw bytes with `model_validate_json` (one pass, in pydantic's Rust
   core): malformed JSON or a wrong content type is a 400, an invalid document a 422 naming the
   field; a body over MAX_BODY_BYTES is read to its end and answered 413 (so a client that
   sends everything before it reads gets the answer). `unique_api=True` turns these into the
   statuses the unique_sdk maps (`webapp.errors`);
3. runs the view. A read view returns the response. A write view declared with
   `prepares=True` is a *prepare* step: it checks and redacts the input and counts its tokens
   (reading what it needs in a short read transaction, none when the key and the project's
   redaction rules come from the cache), then returns a `Write` (`webapp.ingest.transaction`):
   its database step, a named function that runs only the SQL and returns the response, with
   the prepared values it is called with. (A plain write view is its own step.) The read
   transaction, if any, is ended and `run_write` runs the step in the write transaction:
   `begin_write()` (SQLite's write lock up front), once more after a lost insert race, a 503
   when the database stays busy (see there).

flask-openapi3 is told not to validate (`__delay_validate_request__`): its body parsing answers
malformed JSON with a 422 and cannot tell a wrong content type apart.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, get_type_hints

from flask import current_app, g, request
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from ..auth import authenticate_api_key, check_api_cache
from ..body_deadline import discard_body
from ..db import db, utcnow
from ..errors import ApiError, answer_as_unique_api, validation_details
from ..ingest import WriteContext, load_rules
from ..ingest.transaction import StaleCache, Write, busy, run_write
from .schemas import CURSOR


def _is_json_mimetype(mimetype: str) -> bool:
    return mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    )


def parse_body(model: type[BaseModel]) -> BaseModel:
    """The request body as `model`, or an ApiError (400 malformed / 422 invalid)."""
    if not _is_json_mimetype(request.mimetype):
        raise ApiError(
            400,
            f"expected a JSON body with 'Content-Type: application/json', "
            f"got {request.mimetype or 'no content type'!r}",
        )
    limit = request.max_content_length
    if limit is not None and (request.content_length or 0) > limit:
        discard_body(request.environ)
        raise RequestEntityTooLarge()
    raw = request.get_data(cache=False)
    if limit is not None and request.content_length is None and len(raw) >= limit:
        # A chunked body (no Content-Length) is cut at the limit by werkzeug, which raises
        # only for bodies that announce their length: treat reaching the limit as exceeding it.
        discard_body(request.environ)
        raise RequestEntityTooLarge()
    if not raw.strip():
        raise ApiError(400, "the request body is empty; expected a JSON object")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if errors and errors[0]["type"] == "json_invalid":
            reason = errors[0].get("ctx", {}).get("error", "invalid JSON")
            raise ApiError(400, f"malformed JSON: {reason}") from None
        raise _invalid(exc) from None


def _invalid(exc: ValidationError, prefix: str = "") -> ApiError:
    details = validation_details(exc)
    if prefix:
        for item in details:
            item["field"] = f"{prefix}.{item['field']}" if item["field"] else prefix
    first = details[0]
    where = f"{first['field']}: " if first["field"] else ""
    return ApiError(422, f"{where}{first['message']}", details)


def _parse_model(model: type[BaseModel], data: dict[str, Any], prefix: str) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, prefix) from None


def _check_no_nul(path_kwargs: dict[str, Any]) -> None:
    """PostgreSQL cannot compare text with NUL in it: refuse it in every URL value up front."""
    values = [(f"path.{k}", v) for k, v in path_kwargs.items()]
    values += [(f"query.{k}", v) for k, v in request.args.items(multi=True)]
    for field_path, value in values:
        if isinstance(value, str) and "\x00" in value:
            message = "must not contain a NUL character"
            raise ApiError(
                422, f"{field_path}: {message}", [{"field": field_path, "message": message}]
            )


def cursor_error(cursor: str | None, message: str) -> ApiError:
    """A `cursor` the queries could not read: 422 if it is not of the shape the API's cursors
    have (the document's pattern), else 404, as for an id that names nothing: a cursor names a
    page, and the document cannot tell a client which ones exist."""
    shaped = cursor is not None and CURSOR.fullmatch(cursor) is not None
    details = [{"field": "query.cursor", "message": message}]
    return ApiError(404 if shaped else 422, f"query.cursor: {message}", details)


def _parse_inputs(
    models: dict[str, type[BaseModel]], path_kwargs: dict[str, Any]
) -> dict[str, Any]:
    _check_no_nul(path_kwargs)
    inputs: dict[str, Any] = {}
    if "path" in models:
        inputs["path"] = _parse_model(models["path"], path_kwargs, "path")
    if "query" in models:
        inputs["query"] = _parse_model(models["query"], request.args.to_dict(), "query")
    if "body" in models:
        inputs["body"] = parse_body(models["body"])
    return inputs


def endpoint(
    *, write: bool = False, prepares: bool = False, unique_api: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate an API view (below the blueprint's route decorator).

    `write=True`: the view runs in the write transaction. With `prepares=True` as well, the view
    runs before it, outside any write, and returns the `Write` to run in it. `unique_api=True`:
    the view's errors take the statuses the unique_sdk understands (see webapp.errors).
    """
    assert write or not prepares, "prepares=True is for write views"

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        hints = get_type_hints(func)
        models = {
            name: hints[name]
            for name in ("path", "query", "body")
            if name in hints and isinstance(hints[name], type)
        }

        @wraps(func)
        def view(**path_kwargs: Any) -> Any:
            try:
                return run(**path_kwargs)
            except PoolTimeout as exc:
                # Every connection of the worker's pool is busy: back-pressure, not a 500.
                db.session.rollback()
                raise busy() from exc

        def run(**path_kwargs: Any) -> Any:
            if unique_api:
                answer_as_unique_api()
            # The key first: a stranger's request is refused before its body is read, so a
            # slow body without a key cannot keep this thread waiting. A prepare step trusts
            # this worker's cache and checks it in its write transaction (one read less, one
            # transaction less); everything else checks it now.
            authenticate_api_key(defer_check=prepares)
            if prepares and not g.api_cache_checked:
                inputs = _parse_inputs_checked(models, path_kwargs)
                try:
                    return _run_prepared(func, inputs, check=True)
                except StaleCache:
                    pass
                # A key, a price or a rule changed since this worker read them: again, read.
                authenticate_api_key()
                return _run_prepared(func, inputs, check=False)
            inputs = _parse_inputs(models, path_kwargs)
            if not write:
                response = func(**inputs)
                db.session.commit()  # keeps the key's last_used_at, if auth recorded it
                return response
            if prepares:
                return _run_prepared(func, inputs, check=False)
            db.session.commit()  # ends the read (the key) before the write lock is taken
            return run_write(Write(func, kwargs=inputs))

        view.__delay_validate_request__ = True  # type: ignore[attr-defined]
        return view

    return decorate


def _parse_inputs_checked(
    models: dict[str, type[BaseModel]], path_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """`_parse_inputs` for a request whose key came from the cache unchecked: an error is
    answered only once the key is known to be valid (401 still wins over 400/422)."""
    try:
        return _parse_inputs(models, path_kwargs)
    except (ApiError, HTTPException):
        _check_key_now()
        raise


def _check_key_now() -> None:
    """Before answering an error found with an unchecked cached key: a 401 if the key was
    revoked meanwhile (raised from the caller's `except`), else the caller's own error."""
    db.session.rollback()
    try:
        authenticate_api_key()  # reads the version; the key again if it changed
        db.session.commit()
    except ApiError:
        db.session.rollback()
        raise
    except Exception:  # the database failing now: the error being answered stays the one
        db.session.rollback()


def _run_prepared(func: Callable[..., Any], inputs: dict[str, Any], *, check: bool) -> Any:
    """A prepare step, then its `Write` in the write transaction. `check`: the cache was not
    checked yet; the write checks it first and raises `StaleCache` if it was out of date."""
    try:
        write = func(**inputs)
        if not isinstance(write, Write):
            raise TypeError(f"{func.__qualname__} (prepares=True) must return a Write")
        if db.session().in_transaction():
            db.session.commit()  # ends the read (if any) before the write lock is taken
    except (ApiError, HTTPException):
        db.session.rollback()
        if check:
            _check_key_now()
        raise
    except BaseException:
        db.session.rollback()
        raise
    return run_write(write, check=check_api_cache if check else None)


def write_context() -> WriteContext:
    """The request's project, clock, redaction rules and limits (one query for the rules).

    Called by a write view's prepare step, in the read before the write lock."""
    project = g.project
    return WriteContext(
        project_id=project.id,
        now=utcnow(),
        rules=load_rules(project.id),
        max_result_bytes=current_app.config["MAX_RESULT_BYTES"],
        price_overrides=project.price_overrides,
    )
