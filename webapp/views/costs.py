"""Costs: a placeholder until the analytics module's charts land (it owns this area).

Until then the page lists usage per model from the service calls, in one GROUP BY query.
"""

from __future__ import annotations

from sqlalchemy import func, select

from ..db import db
from ..models import Message, ServiceCall
from .common import respond, twin_get
from .context import current_project
from .security import dashboard_blueprint

bp = dashboard_blueprint("costs", __name__)


@twin_get(bp, "/costs")
def costs_get(fmt: str):
    project = current_project()
    rows = db.session.execute(
        select(
            ServiceCall.model,
            func.count().label("service_calls"),
            func.sum(ServiceCall.input_tokens).label("input_tokens"),
            func.sum(ServiceCall.output_tokens).label("output_tokens"),
            func.sum(ServiceCall.cached_tokens).label("cached_tokens"),
            func.sum(ServiceCall.cost_usd).label("cost_usd"),
        )
        .join(Message, Message.id == ServiceCall.message_id)
        .where(Message.project_id == project.id)
        .group_by(ServiceCall.model)
        .order_by(func.sum(ServiceCall.cost_usd).desc().nulls_last(), ServiceCall.model)
    ).all()
    models = [
        {
            "model": r.model,
            "service_calls": int(r.service_calls or 0),
            "input_tokens": int(r.input_tokens or 0),
            "output_tokens": int(r.output_tokens or 0),
            "cached_tokens": int(r.cached_tokens or 0),
            "cost_usd": r.cost_usd,
        }
        for r in rows
    ]
    return respond({"object": "list", "data": models}, page="costs/costs.html", fmt=fmt)
