"""Studies on the dashboard (docs/runs.md, 'Studies'): a page per study with its JSON twin, the
progress part that polls itself while the study runs, and cancel.

URLs:

* ``/studies/<study_id>`` (and ``.json``: the study document, as the API's
  ``GET /api/v1/studies/{id}``);
* ``/studies/<study_id>/progress``: the polled part (progress, then the report);
* ``POST /studies/<study_id>/cancel``: its queued runs are cancelled; for htmx the part, else a
  redirect to the page.

Studies are started over the API (``POST /api/v1/studies``) or by the demo; the runs they
make link to their pages (``/runs/<id>``).
"""

from __future__ import annotations

from typing import Any

from flask import jsonify, redirect, render_template, url_for

from ..db import db
from ..services import studies
from .common import or_404, twin_get, wants_fragment, wants_json
from .context import current_project
from .security import dashboard_blueprint

bp = dashboard_blueprint("studies", __name__)
POLL_SECONDS = 1


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
