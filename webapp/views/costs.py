"""Token and cost analytics pages: the Costs page, chart panels for the conversation and tools
pages, their JSON twins and CSV downloads, and the project's price overrides.

URLs (blueprint ``analytics``):

==========================================  ==================================================
``/costs``, ``/costs.json``                 project charts for the filters (from, to, channel,
                                            tool); htmx gets just the charts
``/costs/<chart>.csv``                      one project chart's table
``/costs/prices`` (POST)                    add or change a price override
``/costs/prices/delete`` (POST)             remove one
``/tools/charts``                           the tool charts panel (htmx fragment)
``/conversations/<id>/charts``, ``.json``   a conversation's charts (replay options:
                                            persistence, freshness, budget)
``/conversations/<id>/charts/<chart>.csv``  one conversation chart's table
==========================================  ==================================================

Views only parse arguments and pick templates; :mod:`webapp.analytics.pages` assembles data.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response, redirect, render_template, request, url_for
from sqlalchemy import select

from ..analytics.conversation_charts import CONVERSATION_CHARTS
from ..analytics.filters import PRESETS, ChartFilters, FilterError, parse_filters
from ..analytics.project_charts import PROJECT_CHARTS
from ..db import begin_write, db, utcnow
from ..errors import error_response
from ..models import Project
from ..pricing import PriceOverride
from ..queries import analytics as queries
from . import charts as pages
from . import security
from .common import (
    error_page,
    jsonable,
    not_found,
    twin_get,
    wants_fragment,
    wants_json,
)
from .context import current_project

bp = Blueprint("analytics", __name__)
bp.before_request(security.require_login)
bp.after_request(security.add_security_headers)

TOOL_PANEL_CHARTS = ("tool-cost", "result-sizes", "errors")
MAX_OVERRIDES = 200
MAX_MODEL_CHARS = 200


# --- helpers ----------------------------------------------------------------------------------


def _filters() -> ChartFilters:
    return parse_filters(request.args, utcnow().date())


def _bad_argument(exc: FilterError, fmt: str = "html"):
    """422: a JSON error for the JSON twins and CSV downloads, an error page otherwise."""
    if fmt in ("json", "csv") or wants_json():
        return error_response(422, str(exc), [{"field": exc.field, "message": exc.message}])
    return error_page(422, "That address does not work", str(exc))


def _project_overrides(project_id: int) -> tuple[dict[str, Any], dict[str, PriceOverride]]:
    """The stored override settings (as entered) and the valid ones, parsed."""
    project = queries.project_by_id(project_id)
    raw = dict(project.price_overrides or {}) if project is not None else {}
    return raw, pages.parse_overrides(raw)


def _csv(text: str, filename: str) -> Response:
    return Response(
        text,
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def _html(template: str, status: int = 200, **context: Any):
    return render_template(template, **context), status, {"Vary": "HX-Request, Accept"}


# --- Costs page -------------------------------------------------------------------------------


def _costs_context(project_id: int, f: ChartFilters, **extra: Any) -> dict[str, Any]:
    raw, overrides = _project_overrides(project_id)
    return {
        "filters": f,
        "presets": PRESETS,
        "charts": pages.project_charts_for(project_id, overrides, f),
        "channels": queries.channel_names(project_id),
        "tools": queries.tool_names(project_id),
        "overrides": raw,
        "override_errors": {},
        "override_form": {},
        **extra,
    }


@twin_get(bp, "/costs")
def costs_get(fmt: str = "html"):
    """The Costs page: project charts that follow the filters; htmx swaps only the charts."""
    try:
        f = _filters()
    except FilterError as exc:
        return _bad_argument(exc, fmt)
    project = current_project()
    if wants_json(fmt):
        _raw, overrides = _project_overrides(project.id)
        charts = pages.project_charts_for(project.id, overrides, f)
        return {
            "project": project.slug,
            "filters": f.query_args(),
            "charts": {name: chart.to_dict() for name, chart in charts.items()},
        }
    if wants_fragment() and request.headers.get("HX-Target") == "charts":
        _raw, overrides = _project_overrides(project.id)
        charts = pages.project_charts_for(project.id, overrides, f)
        return _html("charts/_project_charts.html", filters=f, charts=charts)
    return _html("costs/costs.html", **_costs_context(project.id, f))


@bp.get("/costs/<chart>.csv")
def costs_csv(chart: str):
    if chart not in PROJECT_CHARTS:
        return error_response(404, f"no chart named {chart!r}; one of {', '.join(PROJECT_CHARTS)}")
    try:
        f = _filters()
    except FilterError as exc:
        return _bad_argument(exc, "csv")
    project = current_project()
    _raw, overrides = _project_overrides(project.id)
    table = pages.project_charts_for(project.id, overrides, f, [chart])[chart].table
    name = f"toolscope-{chart}-{f.date_from.isoformat()}-{f.date_to.isoformat()}.csv"
    return _csv(table.to_csv(), name)


@bp.get("/tools/charts")
def tool_charts_get():
    """The tools pages' chart panel (all tools, or one with ``tool=``)."""
    try:
        f = _filters()
    except FilterError as exc:
        return _bad_argument(exc)
    project = current_project()
    _raw, overrides = _project_overrides(project.id)
    charts = pages.project_charts_for(project.id, overrides, f, TOOL_PANEL_CHARTS)
    template = "charts/_tool_charts.html" if wants_fragment() else "charts/tool_charts.html"
    return _html(template, filters=f, charts=charts, presets=PRESETS)


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
        return redirect(url_for("analytics.costs_get", fmt="html", _anchor="prices"))
    f = parse_filters({}, utcnow().date())
    return _html("costs/costs.html", status, **_costs_context(project_id, f, **extra))


def _project_for_update(project_id: int) -> Project:
    """The project row, locked on PostgreSQL so two edits of the overrides cannot lose one
    (SQLite writers are already serialised by begin_write)."""
    project = db.session.scalar(select(Project).where(Project.id == project_id).with_for_update())
    assert project is not None
    return project


@bp.post("/costs/prices")
def price_override_post():
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
def price_override_delete_post():
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


# --- conversation charts ----------------------------------------------------------------------


@twin_get(bp, "/conversations/<int:conversation_id>/charts")
def conversation_charts_get(conversation_id: int, fmt: str):
    try:
        options = pages.parse_conversation_options(request.args)
    except FilterError as exc:
        return _bad_argument(exc, fmt)
    project = current_project()
    _raw, overrides = _project_overrides(project.id)
    result = pages.conversation_charts_for(project.id, overrides, conversation_id, options)
    if result is None:
        return not_found("conversation")
    if wants_json(fmt):
        return {
            "conversation": {
                "id": result.conversation.id,
                "external_id": result.conversation.external_id,
            },
            "options": jsonable(options.query_args()),
            "freshness_seconds": result.freshness_seconds,
            "charts": {name: chart.to_dict() for name, chart in result.charts.items()},
        }
    template = (
        "charts/_conversation_charts.html"
        if wants_fragment()
        else "charts/conversation_charts.html"
    )
    return _html(template, result=result, options=options, charts=result.charts)


@bp.get("/conversations/<int:conversation_id>/charts/<chart>.csv")
def conversation_chart_csv(conversation_id: int, chart: str):
    if chart not in CONVERSATION_CHARTS:
        names = ", ".join(CONVERSATION_CHARTS)
        return error_response(404, f"no chart named {chart!r}; one of {names}")
    try:
        options = pages.parse_conversation_options(request.args)
    except FilterError as exc:
        return _bad_argument(exc, "csv")
    project = current_project()
    _raw, overrides = _project_overrides(project.id)
    result = pages.conversation_charts_for(project.id, overrides, conversation_id, options, [chart])
    if result is None:
        return error_response(404, "no such conversation in this project")
    return _csv(
        result.charts[chart].table.to_csv(),
        f"toolscope-conversation-{conversation_id}-{chart}.csv",
    )


def register(app: Flask) -> None:
    app.register_blueprint(bp)
