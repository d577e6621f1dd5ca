"""Deleting a conversation from its page: a two-step button (the page's "Delete…" opens a
confirmation saying what goes), a CSRF-protected form, then back to the list. The delete is a
`Write` run by `run_write`, as the API's is: once more after a lost race (a deadlock with a
writer), a 503 with Retry-After when the database stays busy."""

from __future__ import annotations

from flask import redirect, url_for

from ...db import db
from ...ingest import delete_conversation
from ...ingest.transaction import Write, run_write
from ..common import not_found
from ..context import current_project
from . import bp


@bp.post("/conversations/<int:conversation_id>/delete")
def conversation_delete_post(conversation_id: int):
    """Delete the conversation with everything it holds; 303 to the list, 404 if absent."""
    project_id = current_project().id
    db.session.rollback()  # the project lookup's read transaction; the write takes the lock
    if not run_write(Write(delete_conversation, (project_id, conversation_id))):
        return not_found("conversation")  # nothing was written
    return redirect(url_for("conversations.conversations_get", deleted=1), code=303)
