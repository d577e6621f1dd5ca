"""Password login (``TOOLSCOPE_PASSWORD``), logout and the project switcher."""

from __future__ import annotations

import math
from urllib.parse import quote, urlsplit

from flask import (
    Response,
    current_app,
    redirect,
    render_template,
    request,
    url_for,
)
from sqlalchemy import select

from .. import login_limit
from ..auth import (
    check_password,
    dashboard_login_needed,
    end_dashboard_session,
    start_dashboard_session,
)
from ..db import begin_write, db, utcnow
from ..models import Project
from .common import is_htmx, row_id
from .context import select_project
from .security import dashboard_blueprint, require_login

bp = dashboard_blueprint("login", __name__, login=False)


# What a `next` path keeps as it is, printable ASCII; the rest (non-ASCII letters, lookalike
# slashes, spaces) is percent-encoded, which keeps it inside the path.
_KEPT_IN_NEXT = "".join(map(chr, range(0x21, 0x7F)))


def safe_next(raw: str | None) -> str:
    """The page to go to after logging in: ``next`` when it is a path on this site, else the
    conversations list.

    A browser drops tabs and line breaks from a URL (``/\\t/evil.example`` becomes
    ``//evil.example``, another host) and reads a backslash as a slash, so ``next`` may hold no
    control character or backslash, and must start with one slash, not two. What remains is
    percent-encoded where needed and must parse as a path without scheme or host.
    """
    default = url_for("conversations.conversations_get")
    if not raw or raw[0] != "/" or raw[:2] == "//":
        return default
    if "\\" in raw or any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in raw):
        return default
    target = quote(raw, safe=_KEPT_IN_NEXT)
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/"):
        return default
    return target


def _login_page(
    target: str, status: int = 200, error: str | None = None, headers: dict[str, str] | None = None
) -> tuple[str, int, dict[str, str]]:
    page = render_template(
        "login/login.html",
        next=target,
        configured=bool(current_app.config.get("PASSWORD")),
        error=error,
    )
    return page, status, headers or {}


@bp.get("/login")
def login_get():
    target = safe_next(request.args.get("next"))
    if not dashboard_login_needed():
        return redirect(target)
    return _login_page(target)


@bp.post("/login")
def login_post():
    target = safe_next(request.form.get("next"))
    now = utcnow()
    begin_write()
    wait = login_limit.count_attempt(request.remote_addr, now)
    if wait is not None:
        db.session.commit()
        minutes = math.ceil(wait / 60)
        error = f"Too many login attempts. Try again in {minutes} minute{'s' * (minutes != 1)}."
        return _login_page(target, 429, error, {"Retry-After": str(wait)})
    if not check_password(request.form.get("password", "")):
        db.session.commit()
        return _login_page(target, 401, "Wrong password.")
    login_limit.clear(request.remote_addr, now)
    start_dashboard_session()
    db.session.commit()
    return redirect(target)


@bp.post("/logout")
def logout_post():
    begin_write()
    end_dashboard_session()
    db.session.commit()
    return redirect(url_for("login.login_get"))


@bp.post("/project")
def project_switch_post():
    """Switch the dashboard to another project, then show its conversations."""
    denied = require_login()
    if denied is not None:
        return denied
    project_id = request.form.get("project_id", type=row_id)
    exists = project_id is not None and db.session.scalar(
        select(Project.id).where(Project.id == project_id)
    )
    if not exists:
        return "no such project", 404
    select_project(project_id)  # type: ignore[arg-type]
    target = url_for("conversations.conversations_get")
    if is_htmx():
        return Response(status=204, headers={"HX-Redirect": target})
    return redirect(target)
