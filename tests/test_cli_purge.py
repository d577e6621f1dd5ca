"""`toolscope purge` deletes in short batches, each its own write transaction: writers running
beside it get the lock within their busy timeout (issue 24, item 5), and it deletes what the
one-transaction purge deleted."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select

from webapp.auth import get_or_create_project
from webapp.cli import main
from webapp.db import db, utcnow
from webapp.models import Conversation, Message, ToolInvocation

CALLS_PER_CONVERSATION = 10


def _fill(app, idle: int, recent: int) -> None:
    """`idle` conversations 40 days old and `recent` ones, each with one message of
    CALLS_PER_CONVERSATION calls, and one old placeholder message without a conversation."""
    now = utcnow()
    with app.app_context():
        project = get_or_create_project("acme")
        rows = [
            {
                "project_id": project.id,
                "external_id": f"c{n}",
                "updated_at": now - timedelta(days=40 if n < idle else 1),
            }
            for n in range(idle + recent)
        ]
        db.session.execute(insert(Conversation), rows)
        found = db.session.execute(select(Conversation.external_id, Conversation.id))
        conversations = {external_id: row_id for external_id, row_id in found}
        db.session.execute(
            insert(Message),
            [
                {
                    "project_id": project.id,
                    "external_id": f"m{n}",
                    "conversation_id": conversations[f"c{n}"],
                }
                for n in range(idle + recent)
            ],
        )
        db.session.add(
            Message(project_id=project.id, external_id="orphan", created_at=now - timedelta(90))
        )
        messages = db.session.execute(
            select(Message.id).where(Message.conversation_id.is_not(None))
        )
        db.session.execute(
            insert(ToolInvocation),
            [
                {
                    "project_id": project.id,
                    "message_id": message_id,
                    "round_index": 0,
                    "sequence_index": k,
                    "function_name": "search",
                    "arguments": {"query": f"word{k} refund policy"},
                    "response": "the refund policy says thirty days " * 4,
                }
                for (message_id,) in messages
                for k in range(CALLS_PER_CONVERSATION)
            ],
        )
        db.session.commit()


def _remaining(app) -> tuple[int, int, int]:
    with app.app_context():
        count = func.count()
        return (
            db.session.scalar(select(count).select_from(Conversation)),
            db.session.scalar(select(func.count()).select_from(Message)),
            db.session.scalar(select(func.count()).select_from(ToolInvocation)),
        )


def test_purge_in_batches_deletes_what_it_did_at_once(app, runner):
    _fill(app, idle=45, recent=5)
    result = runner.invoke(main, args=["purge", "--older-than", "30", "--batch", "7"])
    assert result.exit_code == 0, result.output
    assert "purged 45 conversations and 1 orphan messages" in result.output
    # Progress lines while it works: batches of at most 7 rows.
    assert "purge: 7 conversations deleted" in result.output, result.output
    assert _remaining(app) == (5, 5, 5 * CALLS_PER_CONVERSATION)
    again = runner.invoke(main, args=["purge", "--older-than", "30"])
    assert "purged 0 conversations and 0 orphan messages" in again.output


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_writers_get_the_lock_while_a_large_purge_runs(app, runner):
    """A writer beside a purge of 30,000 calls always gets in, and never waits for more than
    a batch. Its busy timeout, 2 s, is a fifth of the server's (SQLITE_BUSY_TIMEOUT_MS, 10 s):
    at 0.5 s a batch of a loaded CI machine (its 0.25 s target doubled) once locked it out,
    though the server's writers would have waited. In one transaction (about a second on a
    quiet machine) the purge held every writer for its whole length: `longest` catches that."""
    _fill(app, idle=3000, recent=10)
    path = app.config["DATABASE_URL"].removeprefix("sqlite:///")
    done = threading.Event()
    outcome = {"writes": 0, "locked": 0, "longest": 0.0}

    def writer() -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=2.0)
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE project SET name = name WHERE slug = 'acme'")
                conn.execute("COMMIT")
                outcome["writes"] += 1
            except sqlite3.OperationalError as exc:
                assert "locked" in str(exc) or "busy" in str(exc), exc
                outcome["locked"] += 1
            outcome["longest"] = max(outcome["longest"], time.monotonic() - started)
            time.sleep(0.01)
        conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        started = time.monotonic()
        result = runner.invoke(main, args=["purge", "--older-than", "30"])
        took = time.monotonic() - started
    finally:
        done.set()
        thread.join(timeout=0.5)
    assert result.exit_code == 0, result.output
    assert "purged 3000 conversations" in result.output
    assert _remaining(app) == (10, 10, 10 * CALLS_PER_CONVERSATION)
    assert outcome["locked"] == 0, (outcome, took)
    assert outcome["writes"] >= 10, (outcome, took)
    # No write waited for more than a batch (in one transaction, one waited for the purge).
    assert outcome["longest"] < took / 3, (outcome, took)
