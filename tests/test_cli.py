"""The `toolscope` command: keys are shown once, stored hashed, listed and revoked."""

from __future__ import annotations

from sqlalchemy import select

from webapp.auth import hash_key
from webapp.db import db
from webapp.models import ApiKey


def test_keys_create_prints_a_key_that_is_stored_only_as_hash(app, runner):
    result = runner.invoke(args=["keys", "create", "--project", "acme", "--name", "ci"])
    assert result.exit_code == 0, result.output
    plain = result.output.strip()
    assert plain.startswith("ts_") and len(plain) > 30
    with app.app_context():
        key = db.session.scalars(select(ApiKey)).one()
        assert key.key_hash == hash_key(plain)
        assert plain not in (key.key_hash, key.prefix)


def test_keys_list_and_revoke(app, runner):
    runner.invoke(args=["keys", "create", "--project", "acme"])
    listed = runner.invoke(args=["keys", "list"])
    assert "acme" in listed.output and "active" in listed.output
    revoked = runner.invoke(args=["keys", "revoke", "1"])
    assert revoked.exit_code == 0
    assert "revoked" in runner.invoke(args=["keys", "list"]).output
    missing = runner.invoke(args=["keys", "revoke", "99"])
    assert missing.exit_code != 0 and "no key with id 99" in missing.output
