"""Saved views: each list page's menu names its current filters and finds them again, for
everyone using the project (``webapp.ingest.saved_views`` writes them, ``webapp.queries.
saved_views`` reads them).

===============================  ===========================================================
``/views/menu?page=<page>``      the menu's body (htmx loads it when the menu opens)
``/views`` (POST)                save the form's ``query`` as ``name``; 303 to the view
``/views/<id>/delete`` (POST)    forget one; 303 back to its page
===============================  ===========================================================
"""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import redirect, render_template, request, url_for

from ..db import db
from ..ingest import saved_views as writes
from ..ingest.errors import Invalid
from ..ingest.transaction import run_write
from ..queries.saved_views import saved_views
from .common import error_page, not_found
from .context import current_project
from .security import dashboard_blueprint

bp = dashboard_blueprint("saved_views", __name__)

# Each list page's address.
ENDPOINTS = {
    "conversations": "conversations.conversations_get",
    "calls": "calls.calls_get",
    "tools": "tools.tools_get",
    "costs": "costs.costs_get",
}


def page_url(page: str, query: str = "") -> str:
    url = url_for(ENDPOINTS[page])
    return f"{url}?{query}" if query else url


@bp.get("/views/menu")
def menu_get():
    page = request.args.get("page", "")
    if page not in ENDPOINTS:
        return not_found("list page")
    # The query the menu opens on (the address bar's, which htmx names); the menu's script
    # puts the address bar's current one in the form when it is sent.
    current = urlsplit(request.headers.get("HX-Current-URL", "")).query
    return render_template(
        "saved_views/_menu.html",
        page=page,
        page_url=page_url,
        views=saved_views(current_project().id, page),
        query=writes.clean_query(current),
    )


@bp.post("/views")
def create_post():
    project_id = current_project().id
    page = request.form.get("page", "")
    try:
        write = writes.prepare_saved_view(
            project_id, page, request.form.get("name", ""), request.form.get("query", "")
        )
        db.session.rollback()  # the project lookup's read; the write takes the lock
        run_write(write)
    except Invalid as exc:
        return error_page(422, "The view was not saved", exc.message)
    _project_id, page, _name, query = write.args
    return redirect(page_url(page, query), code=303)


@bp.post("/views/<int:view_id>/delete")
def delete_post(view_id: int):
    project_id = current_project().id
    page = request.form.get("page", "")
    db.session.rollback()
    if not run_write(writes.Write(writes.delete_saved_view, (project_id, view_id))):
        return not_found("saved view")
    back = page_url(page) if page in ENDPOINTS else url_for("conversations.index_get")
    return redirect(back, code=303)
