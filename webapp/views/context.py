"""The dashboard's current project (kept in the session, chosen with the project switcher)."""

from __future__ import annotations

from flask import current_app, g, session

from ..auth import get_or_create_project
from ..db import begin_write, db
from ..queries.projects import ProjectRecord, all_projects, find_project

SESSION_KEY = "project_id"


def current_project() -> ProjectRecord:
    """The project the dashboard shows. On a fresh install the default project is created, so
    every page has one to show (that first visit is the only dashboard GET that writes)."""
    if "dashboard_project" in g:
        return g.dashboard_project
    fallback = current_app.config["DEFAULT_PROJECT"]
    project = find_project(session.get(SESSION_KEY), fallback)
    if project is None:
        db.session.rollback()
        begin_write()
        get_or_create_project(fallback)
        db.session.commit()
        project = find_project(None, fallback)
        assert project is not None
    g.dashboard_project = project
    return project


def current_project_id() -> int:
    """The current project's id without a query when the session names one: for polls, whose
    own query is scoped by it (an id that no longer exists simply matches nothing)."""
    project_id = session.get(SESSION_KEY)
    return project_id if isinstance(project_id, int) else current_project().id


def switcher_projects() -> list[ProjectRecord]:
    """All projects, for the switcher in the page header (called by base.html only)."""
    if "dashboard_projects" not in g:
        g.dashboard_projects = all_projects()
    return g.dashboard_projects


def select_project(project_id: int) -> None:
    session[SESSION_KEY] = project_id
