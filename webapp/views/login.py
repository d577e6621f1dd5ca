"""Password login (``TOOLSCOPE_PASSWORD``), logout and the project switcher."""

from __future__ import annotations

from flask import (
    Response,
    current_app,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from sqlalchemy import select

from ..auth import check_password, dashboard_login_needed
from ..db import db
from ..models import Project
from .common import is_htmx, row_id
from .context import select_project
from .security import dashboard_blueprint, require_login

bp = dashboard_blueprint("login", __name__, login=False)


def safe_next(raw: str | None) -> str:
    """Only same-site paths: ``next`` must never send someone to another host."""
    if raw and raw.startswith("/") and not raw.startswith(("//", "/\\")):
        return raw
    return url_for("conversations.conversations_get")


@bp.get("/login")
def login_get():
    if not dashboard_login_needed():
        return redirect(safe_next(request.args.get("next")))
    return render_template(
        "login/login.html",
        next=safe_next(request.args.get("next")),
        configured=bool(current_app.config.get("PASSWORD")),
    )


@bp.post("/login")
def login_post():
    target = safe_next(request.form.get("next"))
    if check_password(request.form.get("password", "")):
        # A fresh session on login: nothing from before the login carries over.
        session.clear()
        session["logged_in"] = True
        return redirect(target)
    return (
        render_template(
            "login/login.html",
            next=target,
            configured=bool(current_app.config.get("PASSWORD")),
            error="Wrong password.",
        ),
        401,
    )


@bp.post("/logout")
def logout_post():
    session.clear()
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
