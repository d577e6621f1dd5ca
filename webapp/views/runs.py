"""Runs on the dashboard (docs/runs.md, 'Pages and forks'): send a replay to a model from the
replay preview, fork a conversation ("what if…") from a turn or a call, send both policies of a
comparison, a page per run and the list of a conversation's runs, each with its JSON twin; and,
in DEV mode only, the scripted demo model the demo's connection points at.

URLs:

* ``POST /conversations/<id>/runs``: queue a run with the replay options of the form (the
  preview's fields, as the preview reads them), a connection and a model, and the fork's edit
  fields; for htmx the run's panel, which polls itself until the run ends; else a redirect to
  the run's page. The run goes through ``services.model_runs`` (``prepare_run``, then
  ``store_run`` in a write), exactly as the API's ``POST .../runs``;
* ``POST /conversations/<id>/runs/pair``: the comparison's two policies, one run each;
* ``/runs/<run_id>`` (and ``.json``: the run document, as the API's), ``/runs/<run_id>/panel``
  (the polled part);
* ``/conversations/<id>/runs`` (and ``.json``): the conversation's runs, newest first;
* ``/conversations/<id>/fork?call=<call row id>`` or ``?turn=<n>``: the fork form;
* ``POST /dev/scripted-model/v1/chat/completions``: the scripted demo model
  (``replay.scripted_model``), 404 unless DEV is on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from flask import (
    abort,
    current_app,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)
from markupsafe import Markup

from ..db import db, utcnow
from ..ingest.transaction import Write, run_write
from ..queries.conversations import find_conversation
from ..queries.records import ConversationRecord
from ..replay import scripted_model
from ..replay.export import (
    OptionError,
    ReplayQuery,
    form_params,
    parse_comparison,
    parse_query,
    query_params,
)
from ..replay.gc_pause import gc_paused
from ..services import model_connections, model_runs, replay_answer
from ..services.model_runs import RunInputError, RunSpec
from .common import or_404, twin_get, wants_fragment, wants_json
from .context import current_project
from .highlight import fold_tree, highlight_json_text, pretty_json
from .replay.form import turn_choices
from .security import dashboard_blueprint

bp = dashboard_blueprint("runs", __name__)
# The scripted demo model: called by the SDK (no login, no CSRF token; DEV only).
dev_bp = dashboard_blueprint("dev_model", __name__, login=False)

# A conversation page lists this many of its newest runs (the list page has 100).
RUNS_ON_CONVERSATION = 20
# What a panel says while a run is not finished, and how often it looks again.
POLL_SECONDS = 1
ERROR_KINDS = {
    "auth": "The provider refused the key",
    "model_not_found": "The model (or the base URL's path) was not found",
    "bad_request": "The provider refused the request",
    "rate_limited": "Rate limited",
    "server_error": "The provider failed",
    "http_error": "The provider answered with an error",
    "timeout": "No answer in time",
    "connection": "The provider could not be reached",
    "malformed_answer": "The answer could not be read",
    "interrupted": "Interrupted",
    "internal": "Toolscope failed",
}
EDIT_ACTIONS = ("replace_result", "fail_call", "drop_call")


def _conversation(conversation_id: int) -> ConversationRecord:
    return or_404(find_conversation(current_project().id, row_id=conversation_id), "conversation")


# --- What the templates get --------------------------------------------------------------------


def json_tree(value: Any) -> Markup:
    """A value as the replay's raw view shows it: the foldable tree (static/js/jsontree.js)
    within its bounds, else highlighted text."""
    tree = fold_tree(value)
    return tree if tree is not None else highlight_json_text(pretty_json(value))


@dataclass(frozen=True)
class RunView:
    """A run as the pages show it: the run document, and what the templates work out of it."""

    doc: dict[str, Any]
    conversation_id: int
    scripted: bool
    finished: bool
    error_title: str | None

    @property
    def id(self) -> str:
        return self.doc["id"]


def run_view(row: Mapping[str, Any]) -> RunView:
    doc = {"object": "run", **model_runs.document(row)}
    error = doc["error"]
    return RunView(
        doc=doc,
        conversation_id=row["conversation_id"],
        scripted=scripted_model.is_scripted(row["response"])
        or _scripted_connection(row["connection_name"]),
        finished=doc["status"] in model_runs.FINISHED,
        error_title=ERROR_KINDS.get(error["kind"], "Failed") if error else None,
    )


def _scripted_connection(name: str | None) -> bool:
    return name == DEMO_CONNECTION


# The demo's connection (``toolscope demo``): its runs are labelled even before they answer.
DEMO_CONNECTION = "scripted-demo"


def connection_choices() -> list[model_connections.ConnectionRecord]:
    return model_connections.list_connections(db.session, current_project().id)


# --- Creating runs -------------------------------------------------------------------------------


def _edits(form: Mapping[str, str]) -> list[dict[str, Any]]:
    """The fork's fields as edits: one call's result replaced, failed or dropped, then a user
    message appended."""
    edits: list[dict[str, Any]] = []
    action = form.get("edit_action", "")
    call_id = form.get("edit_call", "").strip()
    if action in EDIT_ACTIONS and call_id:
        edit: dict[str, Any] = {"type": action, "call_id": call_id}
        if action == "replace_result":
            edit["content"] = form.get("edit_content", "")
        elif action == "fail_call":
            edit["message"] = form.get("edit_content", "").strip() or "ERROR: the call failed"
        edits.append(edit)
    message = form.get("user_message", "").strip()
    if message:
        edits.append({"type": "append_user_message", "content": message})
    return edits


def _spec(form: Mapping[str, str], query: ReplayQuery, edits: list[dict[str, Any]]) -> RunSpec:
    return RunSpec(
        connection=form.get("connection", "").strip(),
        model=form.get("model", "").strip() or None,
        options={"format": query.format, **query_params(query)},
        edits=edits,
        fresh=form.get("fresh") == "true",
    )


def _queue(conversation: ConversationRecord, specs: list[RunSpec]) -> list[dict[str, Any]]:
    """Prepare every run (reads), end the read, store them in one write, wake the worker."""
    project_id = current_project().id
    now = utcnow()
    prepared = [model_runs.prepare_run(project_id, conversation, s, now=now) for s in specs]
    db.session.commit()  # the read ends before the write lock
    rows = run_write(Write(_store_all, (prepared,)))
    model_runs.notify()
    return [model_runs.get_run(project_id, row["id"]) for row in rows]


def _store_all(prepared: list[model_runs.PreparedRun]) -> list[dict[str, Any]]:
    return [model_runs.store_run(p) for p in prepared]


def _input_error(exc: RunInputError | OptionError, conversation: ConversationRecord):
    status = getattr(exc, "status", 422)
    db.session.rollback()
    data = {"field": exc.field, "message": exc.message, "conversation": conversation}
    if wants_fragment():
        # A fragment the form's target shows (htmx swaps 200s): the error, said plainly.
        return render_template("runs/_input_error.html", **data), 200
    return render_template("runs/input_error.html", **data), status


@bp.post("/conversations/<int:conversation_id>/runs")
def runs_post(conversation_id: int):
    conversation = _conversation(conversation_id)
    try:
        query = parse_query(form_params(request.form))
        rows = _queue(conversation, [_spec(request.form, query, _edits(request.form))])
    except (RunInputError, OptionError) as exc:
        return _input_error(exc, conversation)
    view = run_view(rows[0])
    if wants_fragment():
        return render_template("runs/_panel.html", run=view, compact=True)
    return redirect(url_for("runs.run_get", run_id=view.id), 303)


@bp.post("/conversations/<int:conversation_id>/runs/pair")
def runs_pair_post(conversation_id: int):
    """The comparison's "Send both": policy A's run and policy B's, side by side."""
    conversation = _conversation(conversation_id)
    try:
        query_a, query_b = parse_comparison(
            {k: v for k, v in request.form.items() if k not in ("connection", "model", "fresh")}
        )
        specs = [_spec(request.form, q, []) for q in (query_a, query_b)]
        rows = _queue(conversation, specs)
    except (RunInputError, OptionError) as exc:
        return _input_error(exc, conversation)
    views = [run_view(r) for r in rows]
    if wants_fragment():
        return render_template("runs/_pair.html", runs=views)
    return render_template("runs/pair.html", runs=views, conversation=conversation)


# --- Reading runs ---------------------------------------------------------------------------


def _run(run_id: str) -> RunView:
    return run_view(or_404(model_runs.get_run(current_project().id, run_id), "run"))


@twin_get(bp, "/runs/<run_id>")
def run_get(run_id: str, fmt: str):
    """A run's page: what was sent (no credentials), the raw answer, the next action beside
    what the agent did, usage, cost, latency, status, error; the JSON twin is the run
    document (the API's)."""
    run = _run(run_id)
    if wants_json(fmt):
        return jsonify(run.doc)
    if wants_fragment():
        return render_template("runs/_panel.html", run=run, compact=False)
    conversation = _conversation(run.conversation_id)
    return render_template(
        "runs/run.html",
        run=run,
        conversation=conversation,
        request_tree=json_tree(run.doc["request"]),
        response_tree=json_tree(run.doc["response"]) if run.doc["response"] else None,
    )


@bp.get("/runs/<run_id>/panel")
def run_panel_get(run_id: str):
    """The polled part: status while the run is queued or running, then its outcome."""
    compact = request.args.get("compact") == "1"
    return render_template("runs/_panel.html", run=_run(run_id), compact=compact)


def conversation_runs(conversation: ConversationRecord, limit: int) -> list[RunView]:
    """A conversation's newest runs (one statement)."""
    return [run_view(r) for r in model_runs.list_runs(current_project().id, conversation.id, limit)]


@twin_get(bp, "/conversations/<int:conversation_id>/runs")
def conversation_runs_get(conversation_id: int, fmt: str):
    conversation = _conversation(conversation_id)
    runs = conversation_runs(conversation, 100)
    if wants_json(fmt):
        return jsonify({"object": "list", "data": [r.doc for r in runs], "has_more": False})
    return render_template("runs/list.html", conversation=conversation, runs=runs)


# --- Forks ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ForkCall:
    row_id: int
    call_id: str
    function_name: str
    arguments: Any
    response: str | None
    is_error: bool
    turn: int


@twin_get(bp, "/conversations/<int:conversation_id>/fork")
@gc_paused()
def fork_get(conversation_id: int, fmt: str):
    """The "what if…" form: from a call (``call=<row id>``: the replay cut right after its
    result, rounds kept per service call and trailing results kept, so the edited result is
    what the model reads last and its next action is the agent's next round) or a turn
    (``turn=<n>``: the replay at the start of turn n, any earlier call editable)."""
    conversation = _conversation(conversation_id)
    loaded = replay_answer.load(conversation)
    history = loaded.history
    turns = turn_choices(history)
    calls = _fork_calls(history)
    raw_call = request.args.get("call", "")
    raw_turn = request.args.get("turn", "")
    chosen: ForkCall | None = None
    persistence = "per-run"
    if raw_call.isdigit():
        chosen = next((c for c in calls if c.row_id == int(raw_call)), None)
        if chosen is None:
            abort(404)
        as_of = _after_call(history, chosen.row_id)
        persistence = "per-service-call"
        editable = [chosen]
        turn = chosen.turn
    else:
        turn = int(raw_turn) if raw_turn.isdigit() and 1 <= int(raw_turn) <= len(turns) else None
        turn = turn or len(turns) or 1
        as_of = f"turn:{turn}" if turns else "now"
        editable = [c for c in calls if c.turn < turn]
    data = {
        "conversation": conversation,
        "as_of": as_of,
        "persistence": persistence,
        "turn": turn,
        "turns": turns,
        "call": chosen,
        "calls": editable,
        "connections": connection_choices(),
    }
    if wants_json(fmt):
        return jsonify(
            {
                "conversation": conversation.external_id,
                "as_of": as_of,
                "persistence": persistence,
                "calls": [c.__dict__ for c in editable],
            }
        )
    return render_template("runs/fork.html", **data)


def _fork_calls(history: Any) -> list[ForkCall]:
    """Every call with an id a replay shows, in order, with the turn it belongs to."""
    out: list[ForkCall] = []
    turn = 0
    for m in sorted(history.messages, key=lambda m: (m.created_at, m.row_id)):
        if m.role == "user":
            turn += 1
            continue
        for c in sorted(m.tool_calls, key=lambda c: (c.round_index, c.sequence_index)):
            if not c.external_id:
                continue
            out.append(
                ForkCall(
                    c.row_id,
                    c.external_id,
                    c.function_name,
                    c.arguments,
                    c.response,
                    c.is_error,
                    max(turn, 1),
                )
            )
    return out


def _after_call(history: Any, row_id: int) -> str:
    """The moment a call's result was in (its round complete), as an ``as_of`` time."""
    for m in history.messages:
        same_round = None
        for c in m.tool_calls:
            if c.row_id == row_id:
                same_round = c.round_index
        if same_round is None:
            continue
        times = [
            max(c.created_at, c.response_created_at or c.created_at)
            for c in m.tool_calls
            if c.round_index == same_round
        ]
        return max(times).isoformat()
    return "now"


# --- The scripted demo model (DEV only) ---------------------------------------------------


@dev_bp.post("/dev/scripted-model/v1/chat/completions")
def scripted_chat_post():
    """The scripted demo model's Chat Completions endpoint: 404 unless DEV is on."""
    if not current_app.config.get("DEV"):
        abort(404)
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        error = {"message": "a Chat Completions body with messages", "type": "invalid_request"}
        return jsonify({"error": error}), 400
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
    return jsonify(scripted_model.chat_completion(body, n=int(digest[:6], 16)))
