"""The dashboard's replay pages: the preview of one conversation and the comparison of two
policies, each with its JSON twin and its htmx fragment, and the downloads.

URLs (``conversation_id`` is the dashboard's row id, as on the conversation page):

* ``/conversations/<id>/replay`` (``replay.replay_get``) and ``.../replay.json``: the page and
  the export document; for htmx (the options form) just the result part, and the page's own
  URL with the options to push, so reloading keeps them. ``.../replay/fragment`` is the same
  view, for links made before it answered htmx itself;
* ``/conversations/<id>/replay/download``: the export document as a file;
* ``/conversations/<id>/replay/payload.json``: the payload alone, for the copy button;
* ``/conversations/<id>/replay/compare`` and ``.json``: two option sets side by side.

Every view loads and replays the whole conversation: each pauses the cyclic garbage collector
once, around all of it (see ``webapp.replay.gc_pause``).
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response, current_app, jsonify, render_template, request, url_for
from markupsafe import Markup, escape

from ...db import db, utcnow
from ...queries.conversations import find_conversation
from ...queries.histories import LoadedHistory
from ...queries.records import ConversationRecord
from ...replay.diff import diff_replays, payload_call_rows
from ...replay.export import (
    COMPARE_SIDES,
    BuiltReplay,
    OptionError,
    ReplayQuery,
    comparison_params,
    download_filename,
    form_params,
    parse_comparison,
    parse_query,
    query_params,
)
from ...replay.gc_pause import gc_paused
from ...services import replay_answer
from ...services.model_connections import list_connections
from ..common import (
    BadParameter,
    bad_parameter_response,
    jsonable,
    or_404,
    twin_get,
    wants_fragment,
    wants_json,
)
from ..context import current_project
from ..highlight import (
    RenderedContent,
    fold,
    fold_tree,
    highlight_json_text,
    pretty_json,
    render_text,
    render_value,
)
from . import bp
from .chat import ENTRY_LIMIT, chat_entries, mark_entries, window
from .diagnostics_list import ROW_LIMIT, diagnostics_list
from .form import form_state, turn_choices

# The raw JSON view is highlighted up to this many characters; the download has everything.
RAW_JSON_CHARS = 100_000
# Problems of the naive replay listed on the page (the JSON twin has them all).
NAIVE_PROBLEMS_SHOWN = 12
# A chat bubble shows this much of a result or argument object, a text message a bit more.
RESULT_CHARS = 2_000
TEXT_CHARS = 6_000


@bp.context_processor
def _content_helpers() -> dict[str, Any]:
    """Agent content for the chat, escaped and highlighted by ``views.highlight``."""

    def replay_text(text: str, *, prose: bool = False) -> RenderedContent:
        if prose:  # a message is text even when it looks like JSON
            shown, folded = fold(text, TEXT_CHARS)
            return RenderedContent("text", Markup(escape(shown)), folded, len(text), len(shown))
        return render_text(text, limit=RESULT_CHARS)

    def replay_value(value: Any) -> RenderedContent:
        return render_value(value, limit=RESULT_CHARS)

    return {"replay_text": replay_text, "replay_value": replay_value}


def _show_all() -> bool:
    return request.args.get("show") == "all"


def _view() -> str:
    """Which view of the payload the preview opens with: "chat" or "json"."""
    return "json" if request.args.get("view") == "json" else "chat"


def _focus_row() -> int | None:
    raw = request.args.get("call", "")
    return int(raw) if raw.isdigit() else None


def _conversation(conversation_id: int) -> ConversationRecord:
    """The current project's conversation, or the view stops with a 404."""
    found = find_conversation(current_project().id, row_id=conversation_id)
    return or_404(found, "conversation")


# --- What the templates get --------------------------------------------------------------------


def result_context(built: BuiltReplay, *, marks: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The chat, diagnostics, checks and stats of one replay."""
    fmt = built.options.format
    rows = payload_call_rows(built.history, built.result, fmt)
    entries = chat_entries(built.result.payload, fmt, rows, built.result.diagnostics, built.history)
    if marks is not None:
        entries = mark_entries(entries, marks)
    system = [e for e in entries if e.role == "system"]
    conversation_entries = [e for e in entries if e.role != "system"]
    limit = None if _show_all() else ENTRY_LIMIT
    shown = window(conversation_entries, limit=limit, focus_row=_focus_row())
    visible = conversation_entries[shown.start : shown.end]
    shown_calls = {c.row_id for e in visible for c in e.calls if c.row_id is not None}
    diagnostics = diagnostics_list(
        built.result.diagnostics,
        built.history,
        shown_calls=shown_calls,
        limit=None if _show_all() else ROW_LIMIT,
        focus_row=_focus_row(),
    )
    return {
        "built": built,
        "stats": built.result.stats,
        "system_entries": system,
        "entries": visible,
        "window": shown,
        "diagnostics": diagnostics,
        "naive_shown": NAIVE_PROBLEMS_SHOWN,
    }


def raw_json(payload: dict[str, Any]) -> tuple[Markup, bool, bool]:
    """The payload pretty-printed and highlighted (escaped), whether it was cut short, and
    whether it is a foldable tree (shown whole and within the tree's bounds, see
    ``highlight.fold_tree``).

    Only the first ``RAW_JSON_CHARS`` are encoded: the encoder streams, so a 10 MB payload
    costs no more than a small one. The download and the copy button have all of it."""
    if _show_all():
        rendered = render_value(payload, limit=None, tree=True)
        return rendered.html, False, rendered.foldable
    pieces: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(payload):
        pieces.append(chunk)
        size += len(chunk)
        if size > RAW_JSON_CHARS:
            break
    shown, folded = fold("".join(pieces), RAW_JSON_CHARS)
    tree = None if folded else fold_tree(payload)
    if tree is not None:
        return tree, False, True
    return highlight_json_text(shown), folded, False


def _links(conversation: ConversationRecord, query: ReplayQuery) -> dict[str, str]:
    params = query_params(query)
    cid = conversation.id
    view = {"view": "json"} if _view() == "json" else {}
    return {
        "page_url": url_for("replay.replay_get", conversation_id=cid, **params, **view),
        "json_url": url_for("replay.replay_get", conversation_id=cid, fmt="json", **params),
        "download_url": url_for("replay.replay_download_get", conversation_id=cid, **params),
        "payload_url": url_for("replay.replay_payload_get", conversation_id=cid, **params),
        "compare_url": url_for(
            "replay.replay_compare_get", conversation_id=cid, **query_params(query, prefix="a.")
        ),
        "show_all_url": url_for("replay.replay_get", conversation_id=cid, show="all", **params),
    }


def preview_context(
    conversation: ConversationRecord,
    loaded: LoadedHistory,
    built: BuiltReplay | None,
    error: OptionError | None,
) -> dict[str, Any]:
    """Everything the preview page and its fragment show."""
    data: dict[str, Any] = {
        "conversation": conversation,
        "form": form_state(request.args),
        "turns": turn_choices(loaded.history),
        "error": error,
        "view": _view(),
        "page_action": url_for("replay.replay_get", conversation_id=conversation.id),
    }
    if built is not None:
        data.update(result_context(built))
        data["raw_json"], data["raw_folded"], data["raw_foldable"] = raw_json(built.result.payload)
        data.update(_links(conversation, built.query))
        # "Send to model" (views.runs): the options shown, and the project's connections.
        data["run_options"] = {"format": built.query.format, **query_params(built.query)}
        data["connections"] = list_connections(db.session, current_project().id)
    return data


def _build_preview(
    conversation: ConversationRecord,
) -> tuple[LoadedHistory, BuiltReplay | None, OptionError | None]:
    """Load and replay with the request's options; an unusable option is returned, not
    raised, so the page can still show its form."""
    loaded = replay_answer.load(conversation)
    try:
        query = parse_query(form_params(request.args))
        built = replay_answer.build(conversation, loaded, query, utcnow())
    except OptionError as exc:
        return loaded, None, exc
    return loaded, built, None


def _cached(
    conversation: ConversationRecord,
    variant: replay_answer.Variant,
    encode: replay_answer.Encoder,
) -> replay_answer.Body | OptionError:
    """The export document's bytes (the chunks to send) for the request's options, through
    the replay cache; an unusable option is returned."""
    try:
        query = parse_query(form_params(request.args))
        return replay_answer.answer(conversation, query, variant, encode, now=utcnow())
    except OptionError as exc:
        return exc


def _send(
    body: replay_answer.Body, mimetype: str, headers: dict[str, str] | None = None
) -> Response:
    """The answer's chunks sent as they are (a list: werkzeug then sends them one by one, and
    the length is known): the bytes ``jsonify`` sends, or the download's."""
    response = Response(list(body), mimetype=mimetype, headers=headers)
    response.content_length = sum(map(len, body))
    return response


# --- Views -------------------------------------------------------------------------------------


@twin_get(bp, "/conversations/<int:conversation_id>/replay")
@gc_paused()
def replay_get(conversation_id: int, fmt: str):
    """The replay preview; the JSON twin is the export document (as the API's); for htmx the
    result part, pushing the page's URL with the options (the address stays on an error)."""
    conversation = _conversation(conversation_id)
    if wants_json(fmt) and replay_answer.plain_json(current_app.json, current_app.debug):
        # The API's answer, bytes and all: from the same cache.
        body = _cached(conversation, "json", replay_answer.encode_json)
        if isinstance(body, OptionError):
            return bad_parameter_response(BadParameter(body.field, body.message), "json")
        return _send(body, current_app.json.mimetype)
    loaded, built, error = _build_preview(conversation)
    if wants_json(fmt):
        if error is not None:
            return bad_parameter_response(BadParameter(error.field, error.message), "json")
        assert built is not None
        return jsonify(built.document())
    data = preview_context(conversation, loaded, built, error)
    if fmt != "fragment" and not wants_fragment():
        return render_template("replay/preview.html", **data), 422 if error else 200
    html = render_template("replay/_result.html", **data)
    if error is not None:
        return html, 422, {"HX-Push-Url": "false"}
    return html, 200, {"HX-Push-Url": data["page_url"]}


# The result part alone, whatever the request's headers (a format of its own, so that werkzeug
# does not redirect it to the page's URL).
bp.add_url_rule(
    "/conversations/<int:conversation_id>/replay/fragment",
    view_func=replay_get,
    defaults={"fmt": "fragment"},
)


@bp.get("/conversations/<int:conversation_id>/replay/download")
@gc_paused()
def replay_download_get(conversation_id: int):
    """The export document as a file, for the page's Download button."""
    conversation = _conversation(conversation_id)
    body = _cached(conversation, "download", replay_answer.download_encoder(conversation))
    if isinstance(body, OptionError):
        return bad_parameter_response(BadParameter(body.field, body.message))
    query = parse_query(form_params(request.args))
    filename = download_filename(conversation.external_id, query.format)
    disposition = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return _send(body, "application/json", disposition)


@bp.get("/conversations/<int:conversation_id>/replay/payload.json")
@gc_paused()
def replay_payload_get(conversation_id: int):
    """Just the payload, indented: what the copy button puts on the clipboard."""
    conversation = _conversation(conversation_id)
    _loaded, built, error = _build_preview(conversation)
    if error is not None:
        return bad_parameter_response(BadParameter(error.field, error.message), "json")
    assert built is not None
    return Response(pretty_json(built.result.payload), mimetype="application/json")


@twin_get(bp, "/conversations/<int:conversation_id>/replay/compare")
@gc_paused()
def replay_compare_get(conversation_id: int, fmt: str):
    """Two option sets side by side (``a.<option>``, ``b.<option>``; shared ones apply to
    both), with what only one of them replays and why."""
    conversation = _conversation(conversation_id)
    loaded = replay_answer.load(conversation)
    now = utcnow()
    try:
        query_a, query_b = parse_comparison(request.args)
        a = replay_answer.build(conversation, loaded, query_a, now)
        b = replay_answer.build(conversation, loaded, query_b, now)
    except OptionError as exc:
        error = BadParameter(exc.field, exc.message)
        if wants_json(fmt):
            return bad_parameter_response(error, "json")
        data = _compare_form_context(conversation, loaded)
        data["error"] = exc
        template = "replay/_compare_result.html" if wants_fragment() else "replay/compare.html"
        return render_template(template, **data), 422, {"HX-Push-Url": "false"}
    diff = diff_replays(loaded.history, a.result, a.options.format, b.result, b.options.format)
    if wants_json(fmt):
        return jsonify(
            {
                "a": a.document(),
                "b": b.document(),
                "diff": jsonable(diff),
            }
        )
    data = _compare_form_context(conversation, loaded)
    data.update(
        {
            "error": None,
            "diff": diff,
            "a": result_context(a, marks=diff.marks_a),
            "b": result_context(b, marks=diff.marks_b),
            "page_url": url_for(
                "replay.replay_compare_get",
                conversation_id=conversation.id,
                **query_params(query_a, prefix="a."),
                **query_params(query_b, prefix="b."),
            ),
        }
    )
    if wants_fragment():
        return (
            render_template("replay/_compare_result.html", **data),
            200,
            {"HX-Push-Url": data["page_url"]},
        )
    return render_template("replay/compare.html", **data)


def _compare_form_context(
    conversation: ConversationRecord, loaded: LoadedHistory
) -> dict[str, Any]:
    sided = comparison_params(request.args)
    return {
        "conversation": conversation,
        "forms": {side: form_state(sided, prefix=side + ".") for side in COMPARE_SIDES},
        "turns": turn_choices(loaded.history),
        "preview_url": url_for("replay.replay_get", conversation_id=conversation.id),
        "compare_action": url_for("replay.replay_compare_get", conversation_id=conversation.id),
        "presets": _presets(conversation.id),
        # "Send both" (views.runs): the project's connections.
        "connections": list_connections(db.session, current_project().id),
    }


def _presets(conversation_id: int) -> list[tuple[str, str]]:
    def link(**params: str) -> str:
        return url_for("replay.replay_compare_get", conversation_id=conversation_id, **params)

    return [
        ("Per-run vs per-service-call", link(**{"b.persistence": "per-service-call"})),
        ("Freshness on vs off", link(**{"b.freshness": "off"})),
        ("Trailing trimmed vs kept", link(**{"b.trim_trailing": "false"})),
        ("Compaction on vs off", link(**{"b.compact_sources": "false"})),
        ("No budget vs 4,000 tokens", link(**{"b.context_budget": "4000"})),
    ]
