"""Lists on the settings page: the project's keys, redaction rules and channels."""

from __future__ import annotations

from sqlalchemy import select

from ..db import db
from ..models import ApiKey, Channel, RedactionRule


def api_keys(project_id: int) -> list[ApiKey]:
    return list(
        db.session.scalars(
            select(ApiKey).where(ApiKey.project_id == project_id).order_by(ApiKey.id.desc())
        )
    )


def redaction_rules(project_id: int) -> list[RedactionRule]:
    return list(
        db.session.scalars(
            select(RedactionRule)
            .where(RedactionRule.project_id == project_id)
            .order_by(RedactionRule.id)
        )
    )


def channels(project_id: int) -> list[Channel]:
    return list(
        db.session.scalars(
            select(Channel).where(Channel.project_id == project_id).order_by(Channel.name)
        )
    )
