"""The dashboard's replay pages: the preview of one conversation and the comparison of two
policies, each with its JSON twin, the htmx fragment that updates them, and the downloads.

URLs (``conversation_id`` is the dashboard's row id, as on the conversation page):

* ``/conversations/<id>/replay`` (``replay.preview``) and ``.../replay.json``: the page and the
  export document;
* ``/conversations/<id>/replay/fragment``: the result part of the page, for the options form
  (it tells htmx to push the page's own URL with the options, so reloading keeps them);
* ``/conversations/<id>/replay/download``: the export document as a file;
* ``/conversations/<id>/replay/payload.json``: the payload alone, for the copy button;
* ``/conversations/<id>/replay/compare`` and ``.json``: two option sets side by side.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Response, jsonify, render_template, request, url_for
from markupsafe import Markup, escape

from ...api.replay import download_response
from ...db import utcnow
from ...queries.histories import LoadedHistory
from ...replay.diff import diff_replays, payload_call_rows
from ...replay.export import (
    COMPARE_SIDES,
    OptionError,
    ReplayQuery,
    comparison_params,
    form_params,
    parse_comparison,
    parse_query,
    query_params,
)
from ..common import (
    BadParameter,
    bad_parameter_response,
    jsonable,
    not_found,
    twin_get,
    wants_fragment,
    wants_json,
)
from ..context import current_project
from ..highlight import (
    RenderedContent,
    fold,
    highlight_json_text,
    pretty_json,
    render_text,
    render_value,
)
from ..security import dashboard_blueprint
from . import service
from .chat import ENTRY_LIMIT, chat_entries, mark_entries, window
from .diagnostics_list import ROW_LIMIT, diagnostics_list
from .form import form_state, turn_choices

bp = dashboard_blueprint("replay", __name__)

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


def _conversation(conversation_id: int) -> service.StoredConversation | None:
    return service.find_conversation(current_project().id, row_id=conversation_id)


# --- What the templates get --------------------------------------------------------------------


def result_context(
    built: service.BuiltReplay, *, marks: tuple[str, ...] | None = None
) -> dict[str, Any]:
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


def raw_json(payload: dict[str, Any]) -> tuple[Markup, bool]:
    """The payload pretty-printed and highlighted (escaped), and whether it was cut short.

    Only the first ``RAW_JSON_CHARS`` are encoded: the encoder streams, so a 10 MB payload
    costs no more than a small one. The download and the copy button have all of it."""
    if _show_all():
        return render_value(payload, limit=None).html, False
    pieces: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(payload):
        pieces.append(chunk)
        size += len(chunk)
        if size > RAW_JSON_CHARS:
            break
    shown, folded = fold("".join(pieces), RAW_JSON_CHARS)
    return highlight_json_text(shown), folded


def _links(conversation: service.StoredConversation, query: ReplayQuery) -> dict[str, str]:
    params = query_params(query)
    cid = conversation.row_id
    view = {"view": "json"} if _view() == "json" else {}
    return {
        "page_url": url_for("replay.preview", conversation_id=cid, **params, **view),
        "json_url": url_for("replay.preview", conversation_id=cid, fmt="json", **params),
        "download_url": url_for("replay.download", conversation_id=cid, **params),
        "payload_url": url_for("replay.payload", conversation_id=cid, **params),
        "compare_url": url_for(
            "replay.compare", conversation_id=cid, **query_params(query, prefix="a.")
        ),
        "show_all_url": url_for("replay.preview", conversation_id=cid, show="all", **params),
    }


def preview_context(
    conversation: service.StoredConversation,
    loaded: LoadedHistory,
    built: service.BuiltReplay | None,
    error: OptionError | None,
) -> dict[str, Any]:
    """Everything the preview page and its fragment show."""
    data: dict[str, Any] = {
        "conversation": conversation,
        "form": form_state(request.args),
        "turns": turn_choices(loaded.history),
        "error": error,
        "view": _view(),
        "fragment_url": url_for("replay.fragment", conversation_id=conversation.row_id),
        "page_action": url_for("replay.preview", conversation_id=conversation.row_id),
    }
    if built is not None:
        data.update(result_context(built))
        data["raw_json"], data["raw_folded"] = raw_json(built.result.payload)
        data.update(_links(conversation, built.query))
    return data


def _build_preview(
    conversation: service.StoredConversation,
) -> tuple[LoadedHistory, service.BuiltReplay | None, OptionError | None]:
    """Load and replay with the request's options; an unusable option is returned, not
    raised, so the page can still show its form."""
    loaded = service.load(conversation)
    try:
        query = parse_query(form_params(request.args))
        built = service.build(conversation, loaded, query, utcnow())
    except OptionError as exc:
        return loaded, None, exc
    return loaded, built, None


# --- Views -------------------------------------------------------------------------------------


@twin_get(bp, "/conversations/<int:conversation_id>/replay")
@service.without_cyclic_gc
def preview(conversation_id: int, fmt: str):
    """The replay preview; the JSON twin is the export document (as the API's)."""
    conversation = _conversation(conversation_id)
    if conversation is None:
        return not_found("conversation")
    loaded, built, error = _build_preview(conversation)
    if wants_json(fmt):
        if error is not None:
            return bad_parameter_response(BadParameter(error.field, error.message), "json")
        assert built is not None
        return jsonify(built.document())
    data = preview_context(conversation, loaded, built, error)
    status = 422 if error else 200
    if wants_fragment():
        return render_template("replay/_result.html", **data), status
    return render_template("replay/preview.html", **data), status


@bp.get("/conversations/<int:conversation_id>/replay/fragment")
@service.without_cyclic_gc
def fragment(conversation_id: int):
    """The result part of the preview for the options form; pushes the page's URL."""
    conversation = _conversation(conversation_id)
    if conversation is None:
        return not_found("conversation")
    loaded, built, error = _build_preview(conversation)
    data = preview_context(conversation, loaded, built, error)
    html = render_template("replay/_result.html", **data)
    if error is not None:
        # Keep the address as it was: the options in it still work.
        return html, 422, {"HX-Push-Url": "false"}
    return html, 200, {"HX-Push-Url": data["page_url"]}


@bp.get("/conversations/<int:conversation_id>/replay/download")
@service.without_cyclic_gc
def download(conversation_id: int):
    """The export document as a file, for the page's Download button."""
    conversation = _conversation(conversation_id)
    if conversation is None:
        return not_found("conversation")
    _loaded, built, error = _build_preview(conversation)
    if error is not None:
        return bad_parameter_response(BadParameter(error.field, error.message))
    assert built is not None
    return download_response(built.document(), conversation.info.external_id, built.query.format)


@bp.get("/conversations/<int:conversation_id>/replay/payload.json")
@service.without_cyclic_gc
def payload(conversation_id: int):
    """Just the payload, indented: what the copy button puts on the clipboard."""
    conversation = _conversation(conversation_id)
    if conversation is None:
        return not_found("conversation")
    _loaded, built, error = _build_preview(conversation)
    if error is not None:
        return bad_parameter_response(BadParameter(error.field, error.message), "json")
    assert built is not None
    return Response(pretty_json(built.result.payload), mimetype="application/json")


@twin_get(bp, "/conversations/<int:conversation_id>/replay/compare")
@service.without_cyclic_gc
def compare(conversation_id: int, fmt: str):
    """Two option sets side by side (``a.<option>``, ``b.<option>``; shared ones apply to
    both), with what only one of them replays and why."""
    conversation = _conversation(conversation_id)
    if conversation is None:
        return not_found("conversation")
    loaded = service.load(conversation)
    now = utcnow()
    try:
        query_a, query_b = parse_comparison(request.args)
        a = service.build(conversation, loaded, query_a, now)
        b = service.build(conversation, loaded, query_b, now)
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
                "replay.compare",
                conversation_id=conversation.row_id,
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
    conversation: service.StoredConversation, loaded: LoadedHistory
) -> dict[str, Any]:
    sided = comparison_params(request.args)
    return {
        "conversation": conversation,
        "forms": {side: form_state(sided, prefix=side + ".") for side in COMPARE_SIDES},
        "turns": turn_choices(loaded.history),
        "preview_url": url_for("replay.preview", conversation_id=conversation.row_id),
        "compare_action": url_for("replay.compare", conversation_id=conversation.row_id),
        "presets": _presets(conversation.row_id),
    }


def _presets(conversation_id: int) -> list[tuple[str, str]]:
    def link(**params: str) -> str:
        return url_for("replay.compare", conversation_id=conversation_id, **params)

    return [
        ("Per-run vs per-service-call", link(**{"b.persistence": "per-service-call"})),
        ("Freshness on vs off", link(**{"b.freshness": "off"})),
        ("Trailing trimmed vs kept", link(**{"b.trim_trailing": "false"})),
        ("Compaction on vs off", link(**{"b.compact_sources": "false"})),
        ("No budget vs 4,000 tokens", link(**{"b.context_budget": "4000"})),
    ]
