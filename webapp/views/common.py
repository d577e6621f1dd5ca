"""What every dashboard view shares: full page, htmx fragment or JSON twin from one context."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar

from flask import Blueprint, Response, abort, jsonify, make_response, render_template, request
from markupsafe import Markup

from ..db import MAX_BIGINT, MAX_INT
from ..errors import error_response
from ..queries.cursors import CursorError
from ..queries.cursors import decode as decode_cursor


def twin_get(bp: Blueprint, rule: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a GET view at ``rule`` (``fmt="html"``) and at ``rule + ".json"``
    (``fmt="json"``): the page and its JSON twin. The HTML rule is added first, so
    ``url_for`` without ``fmt`` builds the page's URL."""

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        bp.add_url_rule(rule, view_func=view, methods=["GET"], defaults={"fmt": "html"})
        bp.add_url_rule(rule + ".json", view_func=view, methods=["GET"], defaults={"fmt": "json"})
        return view

    return decorator


def is_htmx() -> bool:
    return request.headers.get("HX-Request") == "true"


def wants_fragment() -> bool:
    """An htmx request for a part of the page. Boosted navigation and history restores want the
    whole page even though htmx sends them."""
    return (
        is_htmx()
        and request.headers.get("HX-Boosted") != "true"
        and request.headers.get("HX-History-Restore-Request") != "true"
    )


def wants_json(fmt: str | None = None) -> bool:
    """The JSON twin: the ``.json`` URL, or a request that prefers application/json."""
    if fmt == "json":
        return True
    return request.accept_mimetypes.best_match(["text/html", "application/json"]) == (
        "application/json"
    )


def jsonable(value: Any) -> Any:
    """Plain JSON data from view models: dataclasses become dicts (fields marked
    ``metadata={"json": False}`` — rendered HTML, figures — are left out), timestamps ISO 8601,
    decimals strings (money must not turn into floats)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.metadata.get("json", True)
        }
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def respond(
    data: Mapping[str, Any],
    *,
    page: str,
    fragment: str | None = None,
    fmt: str | None = None,
    status: int = 200,
    json_keys: tuple[str, ...] | None = None,
) -> Response | tuple[str, int, dict[str, str]]:
    """Render ``data`` as the JSON twin, the htmx fragment or the full page.

    ``json_keys`` picks what the twin contains (default: everything in ``data``); the page and
    the fragment get the same ``data`` as template context.
    """
    if wants_json(fmt):
        payload = {k: data[k] for k in json_keys} if json_keys is not None else dict(data)
        response = jsonify(jsonable(payload))
        response.status_code = status
        return response
    template = fragment if fragment and wants_fragment() else page
    return render_template(template, **data), status, {"Vary": "HX-Request, Accept"}


def push_url(
    response: Response | tuple[str, int, dict[str, str]], url: str
) -> Response | tuple[str, int, dict[str, str]]:
    """A filtered list's fragment, telling htmx to show ``url`` in the address bar (the
    filters in their canonical form, without empty parameters)."""
    if not isinstance(response, tuple):
        return response
    body, status, headers = response
    return body, status, {**headers, "HX-Push-Url": url}


def attachment(body: str, filename: str, mimetype: str = "application/json") -> Response:
    """``body`` as a file download named ``filename``."""
    return Response(
        body,
        mimetype=mimetype,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


class BadParameter(Exception):
    """A query parameter a page cannot use: answered 422 as a JSON error or an error page."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status


def bad_parameter_response(exc: BadParameter, fmt: str | None = None):
    if wants_json(fmt) or request.path.endswith(".json"):
        return error_response(exc.status, str(exc), [{"field": exc.field, "message": exc.message}])
    return error_page(exc.status, "That address does not work", str(exc))


def error_page(status: int, title: str, message: str):
    template = "errors/_error.html" if wants_fragment() else "errors/error.html"
    return render_template(template, title=title, message=message, status=status), status


def not_found(what: str = "page"):
    """404 for anything outside the current project — the same answer as for nothing at all."""
    if wants_json() or request.path.endswith(".json"):
        return error_response(404, f"no such {what} in this project")
    return error_page(404, "Not found", f"There is no such {what} in this project.")


T = TypeVar("T")


def or_404(found: T | None, what: str = "page") -> T:
    """``found``, or the view stops here with :func:`not_found` for ``what``."""
    if found is None:
        abort(make_response(not_found(what)))
    return found


def int_arg(
    name: str, default: int | None = None, *, minimum: int = 0, maximum: int = MAX_BIGINT
) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(name, "must be an integer") from None
    if value < minimum:
        raise BadParameter(name, f"must be at least {minimum}")
    if value > maximum:
        raise BadParameter(name, f"must be at most {maximum}")
    return value


def row_id(raw: str) -> int:
    """An id of an Integer column from a form (`request.form.get(name, type=row_id)`); out of
    range is a ValueError, so the form value counts as missing."""
    value = int(raw)
    if not 0 < value <= MAX_INT:
        raise ValueError(f"{value} is not a row id")
    return value


def page_limit(default: int, maximum: int) -> int:
    value = int_arg("limit", default, minimum=1)
    assert value is not None
    if value > maximum:
        raise BadParameter("limit", f"must be at most {maximum}")
    return value


def cursor_arg(name: str = "cursor") -> tuple[Any, int] | None:
    raw = request.args.get(name)
    if not raw:
        return None
    try:
        return decode_cursor(raw)
    except CursorError as exc:
        raise BadParameter(name, str(exc)) from None
