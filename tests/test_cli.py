"""The `toolscope` command: keys are shown once, stored hashed, listed and revoked."""

from __future__ import annotations

from sqlalchemy import select

from webapp.auth import hash_key
from webapp.cli import main
from webapp.db import db
from webapp.models import ApiKey


def test_keys_create_prints_a_key_that_is_stored_only_as_hash(app, runner):
    result = runner.invoke(main, args=["keys", "create", "--project", "acme", "--name", "ci"])
    assert result.exit_code == 0, result.output
    plain = result.output.strip()
    assert plain.startswith("ts_") and len(plain) > 30
    with app.app_context():
        key = db.session.scalars(select(ApiKey)).one()
        assert key.key_hash == hash_key(plain)
        assert plain not in (key.key_hash, key.prefix)


def test_keys_list_and_revoke(app, runner):
    runner.invoke(main, args=["keys", "create", "--project", "acme"])
    listed = runner.invoke(main, args=["keys", "list"])
    assert "acme" in listed.output and "active" in listed.output
    revoked = runner.invoke(main, args=["keys", "revoke", "1"])
    assert revoked.exit_code == 0
    assert "revoked" in runner.invoke(main, args=["keys", "list"]).output
    missing = runner.invoke(main, args=["keys", "revoke", "99"])
    assert missing.exit_code != 0 and "no key with id 99" in missing.output


def test_purge_deletes_idle_conversations_with_their_rows_and_old_orphans(app, runner):
    from datetime import timedelta

    from sqlalchemy import func

    from webapp.auth import get_or_create_project
    from webapp.db import utcnow
    from webapp.models import Conversation, Message, ToolInvocation

    now = utcnow()
    with app.app_context():
        project = get_or_create_project("acme")
        for external_id, idle_days in (("old", 40), ("recent", 2)):
            conversation = Conversation(
                project_id=project.id,
                external_id=external_id,
                updated_at=now - timedelta(idle_days),
            )
            db.session.add(conversation)
            db.session.flush()
            message = Message(
                project_id=project.id,
                external_id=f"{external_id}-a1",
                conversation_id=conversation.id,
                created_at=now - timedelta(idle_days),
            )
            db.session.add(message)
            db.session.flush()
            db.session.add(
                ToolInvocation(
                    project_id=project.id,
                    message_id=message.id,
                    round_index=0,
                    sequence_index=0,
                    function_name="search",
                )
            )
        db.session.add(
            Message(project_id=project.id, external_id="orphan", created_at=now - timedelta(90))
        )
        db.session.commit()

    result = runner.invoke(main, args=["purge", "--older-than", "30"])
    assert result.exit_code == 0, result.output
    assert "purged 1 conversations and 1 orphan messages" in result.output
    with app.app_context():
        assert db.session.scalars(select(Conversation.external_id)).all() == ["recent"]
        assert db.session.scalars(select(Message.external_id)).all() == ["recent-a1"]
        assert db.session.scalar(select(func.count()).select_from(ToolInvocation)) == 1
