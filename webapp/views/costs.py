"""The Costs page: project charts that follow the filters, their JSON twin and CSV downloads,
and the project's price overrides.

==============================  =========================================================
``/costs``, ``/costs.json``     project charts for the filters (from, to, channel, tool);
                                htmx gets just the charts
``/costs/<chart>.csv``          one project chart's table
``/costs/prices`` (POST)        add or change a price override
``/costs/prices/delete`` (POST) remove one
==============================  =========================================================

The same charts appear on the tools pages (``webapp.views.tools``) and, per conversation, on
the conversation page (``webapp.views.conversations.charts``); ``webapp.views.charts`` puts
them together.
"""

from __future__ import annotations

from typing import Any

from flask import redirect, request, url_for
from sqlalchemy import select

from ..analytics.filters import ChartFilters, FilterError, parse_filters
from ..analytics.project_charts import PROJECT_CHARTS
from ..db import begin_write, db, utcnow
from ..errors import error_response
from ..models import Project
from ..pricing import PriceOverride
from ..queries.projects import channel_names, tool_names
from . import charts
from .common import attachment, push_url, twin_get, wants_fragment, wants_json
from .context import current_project
from .security import dashboard_blueprint

bp = dashboard_blueprint("costs", __name__)

MAX_OVERRIDES = 200
MAX_MODEL_CHARS = 200


def _costs_context(project_id: int, f: ChartFilters, **extra: Any) -> dict[str, Any]:
    raw, overrides = charts.project_overrides(project_id)
    return {
        "filters": f,
        "charts": charts.project_charts_for(project_id, overrides, f),
        "channels": channel_names(project_id),
        "tools": tool_names(project_id),
        "overrides": raw,
        "override_errors": {},
        "override_form": {},
        **extra,
    }


@twin_get(bp, "/costs")
def costs_get(fmt: str = "html"):
    """The Costs page: project charts that follow the filters; htmx swaps only the charts."""
    try:
        f = charts.filters_arg()
    except FilterError as exc:
        return charts.bad_argument(exc, fmt)
    project = current_project()
    if wants_json(fmt):
        _raw, overrides = charts.project_overrides(project.id)
        shown = charts.project_charts_for(project.id, overrides, f)
        return {
            "project": project.slug,
            "filters": f.query_args(),
            "charts": {name: chart.to_dict() for name, chart in shown.items()},
        }
    if wants_fragment() and request.headers.get("HX-Target") == "charts":
        _raw, overrides = charts.project_overrides(project.id)
        shown = charts.project_charts_for(project.id, overrides, f)
        # The picker's request: the address bar shows the period's URL (no empty fields).
        return push_url(
            charts.html("charts/_project_charts.html", filters=f, charts=shown),
            url_for("costs.costs_get", fmt="html", **f.query_args()),
        )
    return charts.html("costs/costs.html", **_costs_context(project.id, f))


@bp.get("/costs/<chart>.csv")
def chart_csv_get(chart: str):
    if chart not in PROJECT_CHARTS:
        return error_response(404, f"no chart named {chart!r}; one of {', '.join(PROJECT_CHARTS)}")
    try:
        f = charts.filters_arg()
    except FilterError as exc:
        return charts.bad_argument(exc, "csv")
    project = current_project()
    _raw, overrides = charts.project_overrides(project.id)
    table = charts.project_charts_for(project.id, overrides, f, [chart])[chart].table
    name = f"toolscope-{chart}-{f.date_from.isoformat()}-{f.date_to.isoformat()}.csv"
    return attachment(table.to_csv(), name, "text/csv")


# --- price overrides --------------------------------------------------------------------------


def _override_from_form() -> tuple[str, dict[str, str], dict[str, str]]:
    """(model, override as stored, errors by field) from the submitted form."""
    model = request.form.get("model", "").strip()
    values = {
        key: request.form.get(key, "").strip()
        for key in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok")
    }
    stored = {k: v for k, v in values.items() if v}
    errors: dict[str, str] = {}
    if not model or len(model) > MAX_MODEL_CHARS:
        errors["model"] = f"A model name or pattern of 1 to {MAX_MODEL_CHARS} characters."
    for key in ("input_per_mtok", "output_per_mtok"):
        if not values[key]:
            errors[key] = "Required: USD per million tokens."
    if not errors:
        try:
            price = PriceOverride.from_dict(stored)
        except ValueError as exc:
            field = str(exc).split(" ", 1)[0]
            errors[field if field in values else "input_per_mtok"] = str(exc)
        else:
            # Kept as entered (normalised decimal text), so the form shows what was typed.
            stored = {k: str(getattr(price, k)) for k in stored}
    return model, stored, errors


def _overrides_response(project_id: int, status: int = 200, **extra: Any):
    """After a price form: back to the Costs page, or the page again with the errors (422)."""
    if status < 400:
        return redirect(url_for("costs.costs_get", fmt="html", _anchor="prices"))
    f = parse_filters({}, utcnow().date())
    return charts.html("costs/costs.html", status, **_costs_context(project_id, f, **extra))


def _project_for_update(project_id: int) -> Project:
    """The project row, locked on PostgreSQL so two edits of the overrides cannot lose one
    (SQLite writers are already serialised by begin_write)."""
    project = db.session.scalar(select(Project).where(Project.id == project_id).with_for_update())
    assert project is not None
    return project


@bp.post("/costs/prices")
def prices_post():
    """Add or replace the project's price for a model (applies to costs stored from now on)."""
    begin_write()
    project = _project_for_update(current_project().id)
    model, stored, errors = _override_from_form()
    overrides = dict(project.price_overrides or {})
    if not errors and model not in overrides and len(overrides) >= MAX_OVERRIDES:
        errors["model"] = f"At most {MAX_OVERRIDES} price overrides per project."
    if errors:
        db.session.rollback()
        return _overrides_response(
            project.id, 422, override_errors=errors, override_form=dict(request.form)
        )
    overrides[model] = stored
    project.price_overrides = overrides  # a new dict: JSON columns do not track mutation
    db.session.commit()
    return _overrides_response(project.id)


@bp.post("/costs/prices/delete")
def price_delete_post():
    begin_write()
    project = _project_for_update(current_project().id)
    model = request.form.get("model", "")
    overrides = dict(project.price_overrides or {})
    if model not in overrides:
        db.session.rollback()
        return _overrides_response(
            project.id, 404, override_errors={"model": "No price override for that model."}
        )
    del overrides[model]
    project.price_overrides = overrides
    db.session.commit()
    return _overrides_response(project.id)
