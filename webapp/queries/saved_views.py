"""The saved views of a list page (written by ``webapp.ingest.saved_views``), for its menu."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select

from ..db import db
from ..models import SavedView


@dataclass(frozen=True, slots=True)
class SavedViewRow:
    id: int
    name: str
    query: str


def saved_views(project_id: int, page: str) -> list[SavedViewRow]:
    """The page's saved views, by name."""
    rows = db.session.execute(
        select(SavedView.id, SavedView.name, SavedView.query)
        .where(SavedView.project_id == project_id, SavedView.page == page)
        .order_by(SavedView.name, SavedView.id)
    )
    return [SavedViewRow(r.id, r.name, r.query) for r in rows]
