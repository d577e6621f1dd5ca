"""Settings: API keys (shown once), redaction rules, channel freshness windows, projects."""

from __future__ import annotations

import re
from typing import Any

from flask import redirect, render_template, request, url_for
from sqlalchemy import select

from ..auth import create_key, get_or_create_project
from ..db import begin_write, db, utcnow
from ..errors import ApiError
from ..ingest.transaction import Write, run_write
from ..models import ApiKey, Channel, Project, RedactionRule
from ..queries import settings as queries
from ..redaction import DETECTORS, validate_rule
from ..services import model_connections as connections
from .common import is_htmx, jsonable, twin_get, wants_json
from .context import current_project, select_project
from .security import dashboard_blueprint

try:  # The ingestion engineer's module owns what a valid rule is.
    from ..redaction import DETECTORS, validate_rule
except ImportError:  # pragma: no cover - only while webapp.redaction is not merged
    DETECTORS = {"api_key": None, "bearer": None, "email": None, "card": None}

    def validate_rule(kind: str, value: Any) -> str | None:
        return None


bp = dashboard_blueprint("settings", __name__)

RULE_KINDS = ("mask", "redact_paths", "skip")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MAX_WINDOW_SECONDS = 10 * 365 * 24 * 3600


def _page_data(**extra: Any) -> dict[str, Any]:
    project = current_project()
    return {
        "project": project,
        "keys": queries.api_keys(project.id),
        "rules": queries.redaction_rules(project.id),
        "channels": queries.channels(project.id),
        "connections": connections.list_connections(db.session, project.id),
        "connection_kinds": connections.KINDS,
        "allowed_hosts": connections.allowed_hosts(),
        "rule_kinds": RULE_KINDS,
        "detectors": list(DETECTORS),
        "errors": {},
        "form": {},
        **extra,
    }


def _render(status: int = 200, data: dict[str, Any] | None = None, **extra: Any):
    context = data if data is not None else _page_data(**extra)
    return render_template("settings/settings.html", **context), status


def _back(section: str):
    return redirect(url_for("settings.settings_get", _anchor=section))


@twin_get(bp, "/settings")
def settings_get(fmt: str):
    data = _page_data()
    if not wants_json(fmt):
        return _render(data=data)
    return {
        "project": jsonable(data["project"]),
        "keys": [
            {
                "id": k.id,
                "name": k.name,
                "prefix": k.prefix,
                "created_at": k.created_at.isoformat(),
                "last_used_at": k.last_used_at.isoformat() if k.last_used_at else None,
                "revoked_at": k.revoked_at.isoformat() if k.revoked_at else None,
            }
            for k in data["keys"]
        ],
        "redaction_rules": [
            {
                "id": r.id,
                "name": r.name,
                "function_name": r.function_name,
                "kind": r.kind,
                "value": r.value,
                "enabled": r.enabled,
            }
            for r in data["rules"]
        ],
        "channels": [
            {"name": c.name, "freshness_seconds": c.freshness_seconds} for c in data["channels"]
        ],
        "model_connections": [_connection_json(c) for c in data["connections"]],
    }


@bp.post("/settings/keys")
def keys_post():
    """Create a key; the page shows it this once (it is never stored in plain text)."""
    begin_write()
    name = request.form.get("name", "").strip()[:200]
    project = db.session.get(Project, current_project().id)
    assert project is not None
    _key, plain = create_key(project, name)
    db.session.commit()
    return _render(201, new_key=plain, new_key_name=name)


@bp.post("/settings/keys/<int:key_id>/revoke")
def key_revoke_post(key_id: int):
    begin_write()
    key = db.session.scalar(
        select(ApiKey).where(ApiKey.id == key_id, ApiKey.project_id == current_project().id)
    )
    if key is None:
        return _render(404, errors={"keys": "No such key in this project."})
    key.revoked_at = key.revoked_at or utcnow()
    db.session.commit()
    return _back("keys")


def _rule_from_form() -> tuple[dict[str, Any], dict[str, str]]:
    form = {
        "name": request.form.get("name", "").strip(),
        "function_name": request.form.get("function_name", "").strip() or None,
        "kind": request.form.get("kind", ""),
        "value": [
            line.strip() for line in request.form.get("value", "").splitlines() if line.strip()
        ],
    }
    errors: dict[str, str] = {}
    if not form["name"] or len(form["name"]) > 200:
        errors["name"] = "A name of 1 to 200 characters."
    if form["function_name"] is not None and len(form["function_name"]) > 255:
        errors["function_name"] = "At most 255 characters."
    if form["kind"] not in RULE_KINDS:
        errors["kind"] = f"One of {', '.join(RULE_KINDS)}."
    else:
        problem = validate_rule(form["kind"], form["value"])
        if problem:
            errors["value"] = problem
    return form, errors


@bp.post("/settings/rules")
def rules_post():
    begin_write()
    form, errors = _rule_from_form()
    if errors:
        return _render(422, errors=errors, form=form)
    db.session.add(
        RedactionRule(
            project_id=current_project().id,
            name=form["name"],
            function_name=form["function_name"],
            kind=form["kind"],
            value=form["value"] if form["kind"] != "skip" else [],
            enabled=True,
        )
    )
    db.session.commit()
    return _back("rules")


@bp.post("/settings/rules/<int:rule_id>/delete")
def rule_delete_post(rule_id: int):
    begin_write()
    rule = db.session.scalar(
        select(RedactionRule).where(
            RedactionRule.id == rule_id, RedactionRule.project_id == current_project().id
        )
    )
    if rule is None:
        return _render(404, errors={"rules": "No such rule in this project."})
    db.session.delete(rule)
    db.session.commit()
    return _back("rules")


def _window(raw: str, field: str, errors: dict[str, str]) -> int | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        errors[field] = "Whole seconds, or empty."
        return None
    if not 0 <= value <= MAX_WINDOW_SECONDS:
        errors[field] = f"Between 0 and {MAX_WINDOW_SECONDS} seconds."
    return value


@bp.post("/settings/channels")
def channels_post():
    """Set a channel's freshness window (empty: use the project's); creates the channel."""
    begin_write()
    errors: dict[str, str] = {}
    name = request.form.get("name", "").strip()
    if not name or len(name) > 200:
        errors["channel_name"] = "A channel name of 1 to 200 characters."
    window = _window(request.form.get("freshness_seconds", ""), "channel_window", errors)
    if errors:
        return _render(422, errors=errors, form=dict(request.form))
    project_id = current_project().id
    channel = db.session.scalar(
        select(Channel).where(Channel.project_id == project_id, Channel.name == name)
    )
    if channel is None:
        channel = Channel(project_id=project_id, name=name)
        db.session.add(channel)
    channel.freshness_seconds = window
    db.session.commit()
    return _back("channels")


@bp.post("/settings/project")
def project_post():
    """The project's default freshness window (empty: no window)."""
    begin_write()
    errors: dict[str, str] = {}
    window = _window(request.form.get("freshness_seconds", ""), "project_window", errors)
    if errors:
        return _render(422, errors=errors, form=dict(request.form))
    project = db.session.get(Project, current_project().id)
    assert project is not None
    project.freshness_seconds = window
    db.session.commit()
    return _back("project")


@bp.post("/settings/projects")
def projects_post():
    """Create a project and switch to it."""
    begin_write()
    slug = request.form.get("slug", "").strip().lower()
    if not SLUG_RE.match(slug):
        return _render(
            422,
            errors={"slug": "Lower-case letters, digits, - and _ (up to 64)."},
            form=dict(request.form),
        )
    name = request.form.get("name", "").strip()[:200] or slug
    project = get_or_create_project(slug, name)
    db.session.commit()
    select_project(project.id)
    return _back("project")


# --- Model connections (docs/runs.md): the secret is typed in or named as an environment
# variable, never shown again, never put back into the form.


def _connection_json(c: connections.ConnectionRecord) -> dict[str, Any]:
    return {
        "name": c.name,
        "kind": c.kind,
        "base_url": c.base_url,
        "default_model": c.default_model,
        "header_names": list(c.header_names) if c.header_names is not None else None,
        "has_secret": c.has_secret,
        "secret_source": c.secret_source,
        "secret_env": c.secret_env,
        "created_at": c.created_at.isoformat(),
    }


@bp.post("/settings/connections")
def connections_post():
    """Add a model connection; a form with a mistake comes back without the key typed in."""
    form = {
        key: request.form.get(key, "").strip()
        for key in ("name", "kind", "base_url", "default_model", "api_key_env", "headers")
    }
    try:
        draft = connections.ConnectionDraft(
            name=form["name"],
            kind=form["kind"],
            base_url=form["base_url"],
            default_model=form["default_model"] or None,
            headers=connections.parse_header_lines(form["headers"].splitlines()),
            api_key=request.form.get("api_key", "").strip() or None,
            api_key_env=form["api_key_env"] or None,
        )
        values = connections.prepare_connection(draft)
        project_id = current_project().id
        db.session.rollback()  # the read ends before the write lock is taken
        run_write(Write(connections.store_connection, (project_id, values)))
    except ApiError as exc:
        db.session.rollback()
        field = (exc.details or [{}])[0].get("field", "connection")
        message = (exc.details or [{}])[0].get("message", exc.message)
        # The header values may hold keys: the form comes back without them.
        form["headers"] = ""
        return _render(
            exc.status, errors={"connection": f"{field}: {message}"}, connection_form=form
        )
    return _back("connections")


@bp.post("/settings/connections/<name>/delete")
def connection_delete_post(name: str):
    project_id = current_project().id
    db.session.rollback()
    deleted = run_write(Write(connections.delete_connection, (project_id, name)))
    if not deleted:
        return _render(404, errors={"connection": "No such connection in this project."})
    return _back("connections")


@bp.post("/settings/connections/<name>/test")
def connection_test_post(name: str):
    """List the provider's models through its SDK (10 s at most): ok, or the provider's status
    and message. An htmx fragment, or the whole page without script."""
    project_id = current_project().id
    try:
        resolved = connections.resolve_connection(db.session, project_id, name)
    except connections.ConnectionNotFound:
        result = connections.CheckResult(False, "no such connection in this project")
    except connections.ConnectionUnusable as exc:
        result = connections.CheckResult(False, str(exc))
    else:
        db.session.rollback()  # no transaction open while the provider is waited for
        result = connections.check_connection(resolved)
    db.session.rollback()
    if is_htmx():
        return render_template("settings/_connection_test.html", name=name, result=result)
    return _render(200, connection_test={"name": name, "result": result})
