"""Saved views: a list page's filters under a name, per project (the dashboard's menu on the
conversations list, the calls explorer, the tools page and the Costs page). `prepare_saved_view`
checks and cleans what the form sent and returns the `Write` that stores it; a name already
saved for that page is given the new filters. `delete_saved_view` removes one."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from sqlalchemy import delete, func, select

from ..db import db
from ..models import SavedView
from .errors import Invalid
from .transaction import Write
from .values import clean_text

PAGES = ("conversations", "calls", "tools", "costs")
MAX_NAME_CHARS = 100
MAX_QUERY_CHARS = 2000
MAX_PER_PAGE = 50
# Where a list is, not what it shows: a saved view starts at the first page.
_NOT_FILTERS = {"cursor", "csrf_token"}


def clean_query(raw: str) -> str:
    """The query string as saved: its filters in order, without a cursor nor empty values."""
    pairs = parse_qsl((raw or "").lstrip("?"), keep_blank_values=False)
    return urlencode([(k, v) for k, v in pairs if k not in _NOT_FILTERS])


def prepare_saved_view(project_id: int, page: str, name: str, query: str) -> Write[SavedView]:
    """The Write that saves `query` (a list's query string) as `name` on `page`; Invalid if a
    field cannot be stored."""
    if page not in PAGES:
        raise Invalid("page", f"must be one of {', '.join(PAGES)}")
    name = " ".join(clean_text(name or "").split())
    if not name or len(name) > MAX_NAME_CHARS:
        raise Invalid("name", f"a name of 1 to {MAX_NAME_CHARS} characters")
    query = clean_query(query)
    if len(query) > MAX_QUERY_CHARS:
        raise Invalid("query", f"at most {MAX_QUERY_CHARS} characters")
    return Write(store_saved_view, (project_id, page, name, query))


def store_saved_view(project_id: int, page: str, name: str, query: str) -> SavedView:
    """Save the view, or give the one of that name its new filters."""
    view = db.session.scalar(
        select(SavedView).where(
            SavedView.project_id == project_id, SavedView.page == page, SavedView.name == name
        )
    )
    if view is None:
        count = db.session.scalar(
            select(func.count()).where(
                SavedView.project_id == project_id, SavedView.page == page
            )
        )
        if (count or 0) >= MAX_PER_PAGE:
            raise Invalid("name", f"at most {MAX_PER_PAGE} saved views per page")
        view = SavedView(project_id=project_id, page=page, name=name, query=query)
        db.session.add(view)
    else:
        view.query = query
    db.session.flush()
    return view


def delete_saved_view(project_id: int, view_id: int) -> bool:
    """Remove the project's view; False if it has no such view."""
    result = db.session.execute(
        delete(SavedView).where(SavedView.project_id == project_id, SavedView.id == view_id)
    )
    return bool(result.rowcount)
