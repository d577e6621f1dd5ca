"""Toolscope: tool-call observability for LLM agents. `create_app` is the application factory."""

from __future__ import annotations

import os
import secrets
from html import escape as html_escape
from pathlib import Path
from typing import Any

from flask import Response, request
from flask_openapi3 import Info, OpenAPI
from flask_wtf.csrf import CSRFProtect
from sqlalchemy.exc import OperationalError
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.routing import IntegerConverter, Map

from . import db as database
from . import errors, paths, settings
from .body_deadline import BodyDeadline
from .version import __version__

__all__ = ["__version__", "create_app"]

csrf = CSRFProtect()

API_SECURITY = {"bearer": {"type": "http", "scheme": "bearer"}}


def _secret_key(instance_path: str) -> str:
    """A random key kept in the instance folder, so sessions survive restarts."""
    path = Path(instance_path) / "secret_key"
    if not path.exists():
        # Written whole under another name, then linked into place: processes starting at once
        # (gunicorn workers without preload, parallel test workers) all read the one key that
        # won, never a half-written file or a key another process replaced.
        draft = path.with_name(f".secret_key.{os.getpid()}.{secrets.token_hex(4)}")
        draft.write_text(secrets.token_hex(32))
        draft.chmod(0o600)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text().strip()


def create_app(test_config: dict[str, Any] | None = None, *, routes: bool = True) -> OpenAPI:
    """The app. `routes=False` leaves out the API and the pages (and their imports): for a
    process that only works on the database, such as the token pass process."""
    app = OpenAPI(
        __name__,
        instance_relative_config=True,
        template_folder=paths.TEMPLATES,
        static_folder=paths.STATIC,
        info=Info(title="Toolscope API", version=__version__),
        security_schemes=API_SECURITY,
        doc_prefix="/api",
        validation_error_status=422,
        validation_error_callback=errors.validation_error_response,
    )
    Path(app.instance_path).mkdir(parents=True, exist_ok=True)
    app.url_map.converters.update(int=_RowId, bigint=_BigRowId)

    config = settings.load()
    if test_config:
        config.update(test_config)
    if not config["DATABASE_URL"]:
        config["DATABASE_URL"] = "sqlite:///" + str(Path(app.instance_path) / "toolscope.db")
    app.config.update(config)
    app.config.update(
        SECRET_KEY=config["SECRET_KEY"] or _secret_key(app.instance_path),
        SQLALCHEMY_DATABASE_URI=config["DATABASE_URL"],
        SQLALCHEMY_ENGINE_OPTIONS=_engine_options(config["DATABASE_URL"]),
        MAX_CONTENT_LENGTH=config["MAX_BODY_BYTES"],
        SESSION_COOKIE_SECURE=config["SESSION_COOKIE_SECURE"] and not config["DEV"],
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        # The API authenticates with Bearer keys, not cookies; CSRF checks apply to the
        # dashboard's forms and htmx posts only (the API blueprint is exempted).
        WTF_CSRF_TIME_LIMIT=None,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]

    from . import models  # noqa: F401  (registers the tables on the metadata)

    if config["TRUSTED_PROXIES"]:
        # The client address (login limit, DEV's loopback check) from X-Forwarded-For, as
        # appended by that many proxies; further entries could be forged by the client.
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=config["TRUSTED_PROXIES"])  # type: ignore[method-assign]
    # Outermost, so the deadline starts when the request does.
    app.wsgi_app = BodyDeadline(app.wsgi_app, app.config["BODY_TIMEOUT_SECONDS"])
    database.init_app(app)
    errors.init_app(app)
    _answer_read_timeouts(app)
    csrf.init_app(app)
    if routes:
        _register_areas(app)
    return app


class _RowId(IntegerConverter):
    """`<int:...>` in our URLs: an id of an Integer column. A larger number matches no route
    (404) instead of overflowing PostgreSQL's integer (a 500)."""

    largest = database.MAX_INT

    def __init__(self, url_map: Map, *args: Any, **kwargs: Any):
        kwargs.setdefault("max", self.largest)
        super().__init__(url_map, *args, **kwargs)


class _BigRowId(_RowId):
    """`<bigint:...>`: an id of a BigInteger column (messages, tool calls)."""

    largest = database.MAX_BIGINT


def _engine_options(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        # Each gunicorn worker keeps its own connections; SQLite needs no network pool tuning.
        return {}
    # pre_ping: a PostgreSQL restart must not turn into errors on the next requests.
    return {"pool_pre_ping": True, "pool_size": 5, "max_overflow": 10}


def _register_areas(app: OpenAPI) -> None:
    """The JSON API (``/api/v1``) and the dashboard's pages, each registering its blueprints."""
    from . import api, views

    api.register(app)
    views.register(app)


def _answer_read_timeouts(app: OpenAPI) -> None:
    """A read stopped by READ_TIMEOUT_MS (webapp.db) is a 503 `query_timeout` with Retry-After:
    the JSON error document on the API and the JSON twins, a short page elsewhere."""

    @app.errorhandler(OperationalError)
    def _read_timeout(exc: OperationalError):
        if not database.is_read_timeout(exc):
            fallback = app.error_handler_spec[None][None].get(Exception)
            if fallback is None:
                raise exc
            return fallback(exc)
        database.db.session.rollback()
        seconds = app.config["READ_TIMEOUT_MS"] / 1000
        app.logger.warning(
            "read stopped after %.1f s (READ_TIMEOUT_MS) on %s %s",
            seconds,
            request.method,
            request.full_path,
        )
        message = (
            f"the database took longer than {seconds:g} s to read this; it was stopped. "
            "Narrow the filters or the time range, or retry later"
        )
        if request.path.startswith(errors.API_PREFIX) or request.path.endswith(".json"):
            response = errors.error_response(503, message, code=database.READ_TIMEOUT_CODE)
        else:
            response = Response(
                "<!doctype html><html lang=en><meta charset=utf-8>"
                "<title>Took too long - Toolscope</title><h1>This page took too long</h1>"
                f"<p>{html_escape(message)}.</p>",
                503,
                mimetype="text/html",
            )
        response.headers["Retry-After"] = "5"
        return response
