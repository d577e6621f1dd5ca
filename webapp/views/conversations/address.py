"""Addresses agents know: ``/c/<conversation id>`` — the agent's own id, URL-encoded, any
characters (slashes, ``?``, ``#``, ``%``, leading or doubled slashes) — opens the conversation
page at its canonical address (``/conversations/<row id>``), keeping the query string and
letting the browser keep a ``#call-<id>`` fragment across the redirect."""

from __future__ import annotations

from urllib.parse import quote, unquote

from flask import redirect, request, url_for
from werkzeug.routing import BaseConverter

from ...queries.conversations import find_conversation
from ..common import or_404
from ..context import current_project
from . import bp

PREFIX = "/c/"


class AnyIdConverter(BaseConverter):
    """Everything after the prefix, slashes included (even leading or doubled ones)."""

    regex = ".+"
    part_isolating = False


def _requested_id(routed: str) -> str:
    """The id as the client encoded it: from the raw request URI when the server gives one
    (a decoded path has lost the difference between ``/`` and ``%2F`` and may have merged
    slashes), else the routed value."""
    raw = request.environ.get("RAW_URI") or request.environ.get("REQUEST_URI")
    if raw:
        path = raw.split("?", 1)[0].split("#", 1)[0]
        prefix = request.script_root + PREFIX
        if path.startswith(prefix):
            return unquote(path[len(prefix) :], errors="strict")
    return routed


@bp.route(PREFIX + "<anyid:cid>", methods=["GET"], merge_slashes=False, strict_slashes=False)
def conversation_address_get(cid: str):
    """302 to the conversation with that external id in the current project, else 404."""
    try:
        external_id = _requested_id(cid)
    except UnicodeDecodeError:
        external_id = cid
    conversation = or_404(
        find_conversation(current_project().id, external_id=external_id), "conversation"
    )
    # url_for reads `_external`, `_scheme`, ... and the route's own argument from its keyword
    # arguments: a query naming them must not choose the redirect's host or break the call.
    args = {
        name: value
        for name, value in request.args.to_dict(flat=True).items()
        if not name.startswith("_") and name != "conversation_id"
    }
    return redirect(
        url_for("conversations.conversation_get", conversation_id=conversation.id, **args)
    )


def conversation_address(external_id: str) -> str:
    """The ``/c/...`` address of a conversation: every character of the id escaped, so that
    no browser or proxy normalises it (``..``, ``//``)."""
    return request.script_root + PREFIX + quote(external_id, safe="")
