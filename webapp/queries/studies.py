"""The project's studies, newest first, as the studies list page shows them (one statement).

A study's own document (progress, report) is ``services.studies.study_document``; this is the
list's summary of each: its status, what it compared, how far it got and, once done, how often
the next action agreed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select

from ..db import db
from ..models import Study

STUDY = Study.__table__
DEFAULT_LIMIT = 50


@dataclass(frozen=True, slots=True)
class StudyRow:
    id: str
    status: str
    connection: str | None
    model: str | None
    variants: dict[str, Any]
    selection: str  # "ids", "list" or "calls": how its conversations were picked
    conversations: int
    runs_total: int
    runs_done: int
    cost_usd: Decimal | None
    max_cost_usd: Decimal | None
    agree: int | None  # when done: conversations whose next action agrees, of `compared`
    compared: int | None
    created_at: datetime


def list_studies(project_id: int, limit: int = DEFAULT_LIMIT) -> list[StudyRow]:
    stmt = (
        select(
            STUDY.c.id,
            STUDY.c.status,
            STUDY.c.spec,
            STUDY.c.report,
            STUDY.c.runs_total,
            STUDY.c.runs_done,
            STUDY.c.cost_usd,
            STUDY.c.max_cost_usd,
            STUDY.c.created_at,
        )
        .where(STUDY.c.project_id == project_id)
        .order_by(STUDY.c.created_at.desc(), STUDY.c.id.desc())
        .limit(limit)
    )
    return [_row(r) for r in db.session.execute(stmt)]


def _row(r: Any) -> StudyRow:
    spec = r.spec or {}
    report = r.report or {}
    if spec.get("calls") is not None:
        selection = "calls"
    elif spec.get("filters") is not None:
        selection = "list"
    else:
        selection = "ids"
    return StudyRow(
        id=r.id,
        status=r.status,
        connection=spec.get("connection"),
        model=spec.get("model"),
        variants=spec.get("variants") or {},
        selection=selection,
        conversations=len(spec.get("conversations") or []),
        runs_total=r.runs_total or 0,
        runs_done=r.runs_done or 0,
        cost_usd=r.cost_usd,
        max_cost_usd=r.max_cost_usd,
        agree=report.get("agree") if r.report is not None else None,
        compared=report.get("compared") if r.report is not None else None,
        created_at=r.created_at,
    )
