"""What the studies tests share: four orders conversations, the fake's connections, and a study
started through the service as the API starts it."""

from __future__ import annotations

from typing import Any

from runs_support import connect_fake, orders_conversation

from webapp.db import db
from webapp.models import Project
from webapp.services import studies
from webapp.services.studies import StudySpec, VariantSpec

CIDS = ("orders-1", "orders-2", "orders-3", "orders-4")
# At turn 2 the first lookup's result is an hour old: the default freshness leaves it out (the
# scripted model calls again, as the agent did); freshness off keeps it (the model answers).
STALE = {"as_of": "turn:2"}
FRESH = {"as_of": "turn:2", "freshness": "off"}
PRICES = {"scripted*": {"input_per_mtok": "1", "output_per_mtok": "2"}}


def seed(app: Any, project_id: int, fake: Any, cids: tuple[str, ...] = CIDS) -> None:
    for cid in cids:
        orders_conversation(app, project_id, cid)
    connect_fake(app, project_id, fake)
    with app.app_context():
        db.session.get(Project, project_id).price_overrides = PRICES
        db.session.commit()
        db.session.remove()


def start(app: Any, project_id: int, b: Any = "fresh", **kwargs: Any) -> str:
    """A study of the four conversations: a stale, b fresh (or "recorded"); its id."""
    variant_b = VariantSpec(FRESH) if b == "fresh" else b
    spec = StudySpec(
        connection="oa",
        variants={"a": VariantSpec(STALE), "b": variant_b},
        conversation_ids=list(kwargs.pop("cids", CIDS)),
        **kwargs,
    )
    with app.app_context():
        row = studies.create_study(project_id, spec)
        db.session.remove()
    return row["id"]
