"""Projects for the dashboard's project switcher and settings."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from ..db import db
from ..models import Project


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
