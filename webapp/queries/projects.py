"""Projects for the dashboard's project switcher and settings, and what a project's filters offer:
its channel and tool names, its price overrides."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from ..analytics.rollups import DAY
from ..db import db
from ..models import Channel, Project, ToolRollup


@dataclass(frozen=True, slots=True)
class ProjectRecord:
    id: int
    slug: str
    name: str
    freshness_seconds: int | None


def _record(project: Project) -> ProjectRecord:
    return ProjectRecord(project.id, project.slug, project.name, project.freshness_seconds)


def find_project(project_id: int | None, fallback_slug: str) -> ProjectRecord | None:
    """The project with ``project_id``, else the one named ``fallback_slug``, else the oldest
    (one query)."""
    wanted = Project.id == (project_id if project_id is not None else -1)
    preferred = select(Project).order_by(
        wanted.desc(), (Project.slug == fallback_slug).desc(), Project.id
    )
    project = db.session.scalars(preferred.limit(1)).first()
    return _record(project) if project else None


def all_projects() -> list[ProjectRecord]:
    return [_record(p) for p in db.session.scalars(select(Project).order_by(Project.name))]


def price_overrides(project_id: int) -> dict[str, Any]:
    """The project's price overrides as stored (model or pattern -> prices as entered). The
    dashboard has usually loaded the project already: no query then."""
    project = db.session.get(Project, project_id)
    return dict(project.price_overrides or {}) if project is not None else {}


def channel_names(project_id: int) -> list[str]:
    return list(
        db.session.scalars(
            select(Channel.name).where(Channel.project_id == project_id).order_by(Channel.name)
        )
    )


def tool_names(project_id: int) -> list[str]:
    """Every function name the project has called: the names of its daily roll-ups (a row
    exists while a call of that name does), not an index walk over every call."""
    r = ToolRollup
    return list(
        db.session.scalars(
            select(r.function_name)
            .where(r.project_id == project_id, r.span == DAY)
            .group_by(r.function_name)
            .order_by(r.function_name)
        )
    )
