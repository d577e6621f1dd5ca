"""Studies on the dashboard (docs/runs.md, 'Studies'): the list of the project's studies with
the form that starts one, a page per study with its JSON twin, the progress part that polls
itself while the study runs, and cancel.

URLs:

* ``/studies`` (and ``.json``): the project's studies, newest first, and the "Start a study"
  form. Its query arguments pre-fill the form's conversations: ``select=calls`` with the calls
  explorer's filters (``tool``, ``status``, ``q``, ...: "Study these conversations" on
  ``/calls``), ``select=list`` with the conversation list's (on ``/conversations``);
* ``POST /studies/preview``: the form's study estimated (every run prepared, nothing stored):
  conversations, runs, tokens and cost per variant, and whether the spending cap allows it;
  for htmx the preview part, else the whole page. Its "Start the study" button carries a
  fingerprint of what was estimated;
* ``POST /studies``: start it, only when the fingerprint matches the form (else the new
  estimate is shown to confirm again); refused over the cap, as the API refuses it; then the
  study's page;
* ``/studies/<study_id>`` (and ``.json``: the study document, as the API's
  ``GET /api/v1/studies/{id}``);
* ``/studies/<study_id>/progress``: the polled part (progress, then the report);
* ``POST /studies/<study_id>/cancel``: its queued runs are cancelled; for htmx the part, else a
  redirect to the page.

The form goes through ``services.studies`` exactly as the API's ``POST /api/v1/studies``; the
runs a study makes link to their pages (``/runs/<id>``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from flask import Response, jsonify, redirect, render_template, request, url_for

from ..db import db
from ..ingest.transaction import Write, run_write
from ..queries import call_selection
from ..queries import studies as study_list
from ..queries.call_explorer import STATUSES as CALL_STATUSES
from ..queries.projects import channel_names, tool_names
from ..services import model_runs, studies
from ..services.model_connections import list_connections
from ..services.model_runs import RunInputError
from ..services.studies import StudyRefused, StudySpec, VariantSpec
from .calls import STATUS_LABELS
from .common import BadParameter, or_404, twin_get, wants_fragment, wants_json
from .context import current_project
from .conversations.list_filters import parse_filters as parse_list_filters
from .security import dashboard_blueprint

bp = dashboard_blueprint("studies", __name__)
POLL_SECONDS = 1

# A variant's replay policy: a preset, then the options the form sets (empty: the preset's).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("The default replay", {}),
    "freshness_off": ("Freshness window off", {"freshness": "off"}),
    "per_service_call": ("Rounds kept per service call", {"persistence": "per-service-call"}),
    "keep_trailing": ("Trailing results kept", {"trim_trailing": False}),
    "keep_sources": ("Uncited sources kept", {"compact_sources": False}),
    "budget_4000": ("Context budget of 4,000 tokens", {"context_budget": 4000}),
}
OPTION_NAMES = (
    "format",
    "freshness",
    "persistence",
    "trim_trailing",
    "compact_sources",
    "result_token_cap",
    "context_budget",
    "prune",
)
VARIANT_FIELDS = ("preset", "connection", "model", *OPTION_NAMES)
LIST_FIELDS = (
    "q",
    "channel",
    "has_errors",
    "missing_responses",
    "failed_runs",
    "range",
    "from",
    "to",
)
SELECTIONS = ("calls", "list", "ids")
STUDY_FIELDS = (
    "selection",
    "ids",
    "connection",
    "model",
    "as_of",
    "max_cost_usd",
    "concurrency",
    "max_tokens",
)
DEFAULTS = {"selection": "list", "as_of": "now", "a.preset": "default", "b.preset": "freshness_off"}


class FormError(ValueError):
    """A field of the form the study cannot use: said next to the estimate."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# --- The form -------------------------------------------------------------------------------------


def _names() -> list[str]:
    names = list(STUDY_FIELDS)
    names += [f"list.{n}" for n in LIST_FIELDS]
    names += [f"calls.{n}" for n in call_selection.FIELDS]
    names += [f"{v}.{n}" for v in studies.VARIANTS for n in VARIANT_FIELDS]
    return names


def form_values(source: Mapping[str, str]) -> dict[str, str]:
    """The form's fields (known names only, blank ones left out), over the defaults."""
    values = dict(DEFAULTS)
    for name in _names():
        value = (source.get(name) or "").strip()
        if value:
            values[name] = value
        elif name in source and name in DEFAULTS and name != "selection":
            values[name] = DEFAULTS[name]
    return values


def prefill(args: Mapping[str, str]) -> dict[str, str]:
    """``/studies?select=calls&tool=...`` (or ``select=list&channel=...``): the form with the
    explorer's or the list's filters as its conversations."""
    select = args.get("select", "")
    if select not in ("calls", "list"):
        return form_values(args)
    fields = call_selection.FIELDS if select == "calls" else LIST_FIELDS
    source = {f"{select}.{name}": args[name] for name in fields if args.get(name)}
    return form_values({"selection": select, **source})


def fingerprint(values: Mapping[str, str]) -> str:
    """What was estimated: the start button carries it, and a study starts only from a form
    that still says the same."""
    text = json.dumps(sorted(values.items()), separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _prefixed(values: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :]: v for k, v in values.items() if k.startswith(prefix)}


def _selection(values: Mapping[str, str]) -> dict[str, Any]:
    kind = values.get("selection", "list")
    if kind not in SELECTIONS:
        raise FormError("selection", "pick conversations by filters or by their ids")
    if kind == "ids":
        ids = [cid for cid in re.split(r"[\s,]+", values.get("ids", "")) if cid]
        if not ids:
            raise FormError("ids", "name at least one conversation id")
        if len(ids) > studies.MAX_CONVERSATIONS:
            raise FormError("ids", f"at most {studies.MAX_CONVERSATIONS:,} conversations")
        return {"conversation_ids": ids}
    if kind == "list":
        try:
            return {"filters": parse_list_filters(_prefixed(values, "list."))}
        except BadParameter as exc:
            raise FormError(f"list.{exc.field}", exc.message) from None
    try:
        return {"calls": call_selection.selection_filters(_prefixed(values, "calls."))}
    except call_selection.FilterError as exc:
        raise FormError(f"calls.{exc.field}", exc.message) from None


def _number(values: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    raw = values.get(name, "")
    if not raw:
        return None
    try:
        number = int(raw)
    except ValueError:
        raise FormError(name, "must be a whole number") from None
    if not low <= number <= high:
        raise FormError(name, f"must be between {low:,} and {high:,}")
    return number


def _cap(values: Mapping[str, str]) -> Decimal | None:
    raw = values.get("max_cost_usd", "").lstrip("$").strip()
    if not raw:
        return None
    try:
        cap = Decimal(raw)
    except InvalidOperation:
        raise FormError("max_cost_usd", "must be an amount in USD, like 2.50") from None
    if not cap.is_finite() or cap < 0 or cap > Decimal("1e9"):
        raise FormError("max_cost_usd", "must be an amount in USD between 0 and 1,000,000,000")
    return cap


def _variant(values: Mapping[str, str], name: str, kinds: Mapping[str, str]) -> VariantSpec | str:
    preset = values.get(f"{name}.preset", "default")
    if preset == studies.RECORDED:
        if name == "a":
            raise FormError(
                "a.preset", "variant A is sent to a model; only B may be what the agent did"
            )
        return studies.RECORDED
    if preset not in PRESETS:
        raise FormError(f"{name}.preset", "not one of the policies offered")
    options: dict[str, Any] = {"as_of": values.get("as_of", "now"), **PRESETS[preset][1]}
    for option in OPTION_NAMES:
        if values.get(f"{name}.{option}"):
            options[option] = values[f"{name}.{option}"]
    connection = values.get(f"{name}.connection") or None
    if "format" not in options:  # the connection's own wire format
        kind = kinds.get(connection or values.get("connection", ""))
        options["format"] = "anthropic" if kind == "anthropic" else "openai-chat"
    return VariantSpec(options, connection, values.get(f"{name}.model") or None)


def study_spec(values: Mapping[str, str], kinds: Mapping[str, str]) -> StudySpec:
    """The form as the service's StudySpec (what the API's body becomes). Raises FormError."""
    connection = values.get("connection", "")
    if not connection:
        raise FormError("connection", "pick a model connection (Settings adds them)")
    return StudySpec(
        connection=connection,
        model=values.get("model") or None,
        variants={name: _variant(values, name, kinds) for name in studies.VARIANTS},
        max_cost_usd=_cap(values),
        concurrency=_number(values, "concurrency", 1, studies.MAX_CONCURRENCY)
        or studies.DEFAULT_CONCURRENCY,
        max_tokens=_number(values, "max_tokens", 1, model_runs.MAX_OUTPUT_TOKENS),
        **_selection(values),
    )


# --- What the templates get -----------------------------------------------------------------------


@dataclass(frozen=True)
class Preview:
    """The estimate of the form's study, or why it cannot start."""

    estimate: dict[str, Any] | None = None
    variants: dict[str, Any] | None = None
    refused: str | None = None  # over the spending cap (or a cap without a price)
    error: FormError | None = None
    fingerprint: str | None = None
    changed: bool = False  # the start button's form differed from what was estimated
    cap: Decimal | None = None

    @property
    def can_start(self) -> bool:
        return self.estimate is not None and not self.refused and not self.error


def options_summary(options: Mapping[str, Any]) -> str:
    """A variant's replay options in a few words: what differs from the default replay."""
    parts = []
    for name, value in options.items():
        if name == "format" or (name == "as_of" and value == "now"):
            continue
        text = (
            {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
        )
        parts.append(f"{name.replace('_', ' ')} {text}")
    return " · ".join(parts) or "the default replay"


def _form_error(exc: RunInputError, spec: StudySpec) -> FormError:
    """The service names a variant's fields (``variants.a.connection``) and the conversation
    where a run could not be prepared; the form's connection and model are the study's
    unless the variant names its own, and they fail for every conversation alike."""
    field, message = exc.field, exc.message
    parts = field.split(".")
    if len(parts) == 3 and parts[0] == "variants" and parts[2] in ("connection", "model"):
        variant = spec.variants.get(parts[1])
        if isinstance(variant, VariantSpec) and getattr(variant, parts[2]) is None:
            field = parts[2]
        message = re.sub(r" \(conversation '[^']*'\)$", "", message)
    return FormError(field, message)


def _kinds(connections: list[Any]) -> dict[str, str]:
    return {c.name: c.kind for c in connections}


def _variants_shown(spec: StudySpec) -> dict[str, Any]:
    return {
        name: value
        if isinstance(value, str)
        else {"options": dict(value.options), "connection": value.connection, "model": value.model}
        for name, value in spec.variants.items()
    }


def estimate(values: Mapping[str, str], connections: list[Any]) -> tuple[Preview, Any]:
    """Prepare every run of the form's study (reads only, nothing stored): the Preview, and the
    prepared study when it may start."""
    project_id = current_project().id
    try:
        spec = study_spec(values, _kinds(connections))
        prepared = studies.prepare_study(project_id, spec)
    except FormError as exc:
        return Preview(error=exc), None
    except StudyRefused as exc:
        return Preview(
            estimate=exc.estimate,
            variants=_variants_shown(spec),
            refused=exc.message,
            cap=spec.max_cost_usd,
        ), None
    except RunInputError as exc:
        return Preview(error=_form_error(exc, spec)), None
    finally:
        db.session.rollback()  # a read only: nothing to keep
    return Preview(
        estimate=prepared.estimate,
        variants=_variants_shown(spec),
        fingerprint=fingerprint(values),
        cap=spec.max_cost_usd,
    ), prepared


def _form_context(values: Mapping[str, str], preview: Preview | None) -> dict[str, Any]:
    project = current_project()
    connections = list_connections(db.session, project.id)
    return {
        "form": values,
        "preview": preview,
        "connections": connections,
        "channels": channel_names(project.id),
        "tools": tool_names(project.id),
        "call_statuses": [(s, STATUS_LABELS[s][0]) for s in CALL_STATUSES],
        "presets": PRESETS,
        "recorded": studies.RECORDED,
        "max_concurrency": studies.MAX_CONCURRENCY,
        "default_concurrency": studies.DEFAULT_CONCURRENCY,
        "output_tokens": studies.ESTIMATED_OUTPUT_TOKENS,
        "summary": options_summary,
    }


def _list_item(row: study_list.StudyRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "status": row.status,
        "connection": row.connection,
        "model": row.model,
        "variants": row.variants,
        "selection": row.selection,
        "conversations": row.conversations,
        "runs_total": row.runs_total,
        "runs_done": row.runs_done,
        "cost_usd": None if row.cost_usd is None else str(row.cost_usd),
        "max_cost_usd": None if row.max_cost_usd is None else str(row.max_cost_usd),
        "agree": row.agree,
        "compared": row.compared,
        "created_at": row.created_at.isoformat(),
    }


def _list_page(values: Mapping[str, str], preview: Preview | None, status: int = 200):
    rows = study_list.list_studies(current_project().id)
    data = _form_context(values, preview)
    data["studies"] = rows
    data["open_form"] = bool(preview) or not rows or "select" in request.args
    return render_template("studies/list.html", **data), status


# --- The list and starting a study ----------------------------------------------------------------


@twin_get(bp, "/studies")
def studies_get(fmt: str):
    if wants_json(fmt):
        rows = study_list.list_studies(current_project().id)
        return jsonify({"object": "list", "data": [_list_item(r) for r in rows]})
    return _list_page(prefill(request.args), None)


def _preview_answer(values: Mapping[str, str], preview: Preview):
    if wants_fragment():
        connections = list_connections(db.session, current_project().id)
        data = {
            "form": values,
            "preview": preview,
            "connections": connections,
            "summary": options_summary,
        }
        return render_template("studies/_preview.html", **data)
    status = 200 if preview.can_start else 422
    return _list_page(values, preview, status)


@bp.post("/studies/preview")
def study_preview_post():
    """The estimate of the form's study; nothing is stored."""
    values = form_values(request.form)
    connections = list_connections(db.session, current_project().id)
    preview, _ = estimate(values, connections)
    return _preview_answer(values, preview)


@bp.post("/studies")
def studies_post():
    """Start the study the preview estimated: only when the form still says what was estimated
    (else the new estimate, to confirm again), refused over the cap; then the study's page."""
    values = form_values(request.form)
    connections = list_connections(db.session, current_project().id)
    preview, prepared = estimate(values, connections)
    if request.form.get("confirm") != fingerprint(values) and prepared is not None:
        return _preview_answer(values, replace(preview, changed=True))
    if prepared is None:
        return _preview_answer(values, preview)
    row = run_write(Write(studies.store_study, (prepared,)))
    model_runs.notify()
    target = url_for("studies.study_get", study_id=row["id"])
    if wants_fragment():
        return Response(status=204, headers={"HX-Redirect": target})
    return redirect(target, 303)


# --- A study --------------------------------------------------------------------------------------


def _document(study_id: str) -> dict[str, Any]:
    return or_404(studies.study_document(current_project().id, study_id), "study")


def _context(document: dict[str, Any]) -> dict[str, Any]:
    progress = document["progress"]
    total = progress["total"] or 1
    return {
        "study": document,
        "finished": document["report"] is not None,
        "percent": round(100 * progress["done"] / total),
        "poll_seconds": POLL_SECONDS,
    }


@twin_get(bp, "/studies/<study_id>")
def study_get(study_id: str, fmt: str):
    document = _document(study_id)
    if wants_json(fmt):
        return jsonify(document)
    return render_template("studies/study.html", **_context(document))


@bp.get("/studies/<study_id>/progress")
def study_progress_get(study_id: str):
    """The polled part: progress while the study runs, then its report."""
    return render_template("studies/_progress.html", **_context(_document(study_id)))


@bp.post("/studies/<study_id>/cancel")
def study_cancel_post(study_id: str):
    project_id = current_project().id
    _document(study_id)  # 404 for another project's study
    db.session.commit()  # the read ends before the write
    studies.cancel_study(project_id, study_id)  # an ended study stays as it is
    if wants_fragment():
        return render_template("studies/_progress.html", **_context(_document(study_id)))
    return redirect(url_for("studies.study_get", study_id=study_id), 303)
