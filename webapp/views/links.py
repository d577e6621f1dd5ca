"""URLs into other areas that may not be installed yet."""

from __future__ import annotations

from flask import current_app, url_for

REPLAY_ENDPOINT = "replay.preview"


def replay_available() -> bool:
    return REPLAY_ENDPOINT in current_app.view_functions


def replay_url(conversation_id: int, call_id: int | None = None) -> str:
    """The replay preview of a conversation, scrolled to a call; until the replay views are
    installed, the conversation page itself."""
    anchor = f"call-{call_id}" if call_id is not None else None
    if replay_available():
        # ``call`` lets a long replay page render the entries around that call.
        return url_for(
            REPLAY_ENDPOINT, conversation_id=conversation_id, call=call_id, _anchor=anchor
        )
    return url_for(
        "conversations.conversation_get", conversation_id=conversation_id, _anchor=anchor
    )
