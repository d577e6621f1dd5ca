"""What the filtered lists paged by keyset share (the calls explorer, the conversations list):
where a page starts, its context for the templates and the JSON twin, and its answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Response, request, url_for

from ..queries.cursors import CursorError, KeysetPage
from .common import BadParameter, push_url, respond, wants_fragment, wants_json

Position = tuple[Any, int] | None


def page_start(start: Callable[[str | None, str], Position], sort: str) -> Position:
    """Where the page asked for starts (None: the first page): `start`, the list's query,
    reads the ``cursor`` argument for `sort`; a cursor it refuses is a BadParameter."""
    try:
        return start(request.args.get("cursor"), sort)
    except CursorError as exc:
        raise BadParameter("cursor", str(exc)) from None


def wants_page(fmt: str) -> bool:
    """The whole page is asked for: it needs what its filter form offers (channels, tools)."""
    return not wants_fragment() and fmt != "json"


def wants_total(fmt: str, after: Position) -> bool:
    """The page or a new search's results, shown as HTML: they say how many rows match (the
    next rows after a cursor and the JSON twin do not count them)."""
    return after is None and fmt != "json" and not wants_json(fmt)


def list_context(page: KeysetPage[Any], filters: Any, limit: int) -> dict[str, Any]:
    """One page of a list (`filters` has ``query_args()``), as the templates and the JSON twin
    get it."""
    filter_args = filters.query_args()
    return {
        "object": "list",
        "data": page.rows,
        "has_more": page.has_more,
        "next_cursor": page.next_cursor,
        "filters": filters,
        "filter_args": filter_args,
        # What the next-rows loader repeats: the filters, and the page size if one was asked.
        "page_args": {**filter_args, **({"limit": limit} if "limit" in request.args else {})},
    }


def respond_list(
    data: dict[str, Any],
    fmt: str,
    after: Position,
    *,
    page: str,
    results: str,
    rows: str,
    endpoint: str,
) -> Response | tuple[str, int, dict[str, str]]:
    """The full `page`, the `results` fragment of a new search or filter (the address bar then
    shows the filters' URL at `endpoint`), or the next `rows` after a cursor; or the JSON twin
    of any of them."""
    response = respond(
        data,
        page=page,
        fragment=rows if after else results,
        fmt=fmt,
        json_keys=("object", "data", "has_more", "next_cursor", "filters"),
    )
    if wants_fragment() and after is None:
        return push_url(response, url_for(endpoint, **data["filter_args"]))
    return response
