"""`toolscope connections add|list|remove|rotate` (issue 25, docs/runs.md 'Model connections'):
the key from standard input (stored encrypted) or an environment variable, never printed;
rotation after SECRET_KEY changes."""

from __future__ import annotations

from sqlalchemy import select

from webapp.cli import main
from webapp.db import db
from webapp.models import ModelConnection, Project
from webapp.services import model_connections as mc

KEY = "sk-CLISECRET-2b4d6f8a0c"


def _add(runner, *extra, key=KEY, name="main"):
    args = ["connections", "add", "--project", "acme", "--name", name, "--kind", "openai",
            "--base-url", "https://api.openai.com/v1", *extra]  # fmt: skip
    return runner.invoke(main, args=args, input=(key + "\n") if key is not None else None)


def _resolve(app, name="main"):
    with app.app_context():
        project_id = db.session.scalar(select(Project.id).where(Project.slug == "acme"))
        try:
            return mc.resolve_connection(db.session, project_id, name)
        finally:
            db.session.rollback()


def test_add_from_stdin_stores_the_key_encrypted_and_never_prints_it(app, runner):
    added = _add(runner, "--api-key-stdin", "--model", "gpt-4.1", "--header", "X-Team: blue")
    assert added.exit_code == 0, added.output
    assert "added main" in added.output and "key: stored" in added.output
    listed = runner.invoke(main, args=["connections", "list", "--project", "acme"])
    assert listed.exit_code == 0
    assert listed.output.split("\t")[:5] == [
        "acme", "main", "openai", "https://api.openai.com/v1", "gpt-4.1"
    ]  # fmt: skip
    assert KEY not in added.output + listed.output
    with app.app_context():
        row = db.session.scalars(select(ModelConnection)).one()
        assert row.secret_encrypted and KEY not in row.secret_encrypted
        assert "blue" not in (row.headers_encrypted or "")
    resolved = _resolve(app)
    assert resolved.api_key == KEY and resolved.headers == {"X-Team": "blue"}


def test_add_from_an_environment_variable(app, runner, monkeypatch):
    added = _add(runner, "--api-key-env", "TS_CLI_MODEL_KEY", key=None)
    assert added.exit_code == 0, added.output
    assert "key: env:TS_CLI_MODEL_KEY" in added.output
    monkeypatch.setenv("TS_CLI_MODEL_KEY", "from-env")
    assert _resolve(app).api_key == "from-env"


def test_one_source_of_the_key_is_required_and_mistakes_are_clear(app, runner):
    neither = _add(runner, key=None)
    assert neither.exit_code == 2 and "--api-key-env VAR and --api-key-stdin" in neither.output
    both = _add(runner, "--api-key-env", "X", "--api-key-stdin")
    assert both.exit_code == 2
    empty = _add(runner, "--api-key-stdin", key="")
    assert empty.exit_code == 2 and "standard input is empty" in empty.output
    bad_url = runner.invoke(
        main,
        args=["connections", "add", "--project", "acme", "--name", "x", "--kind", "openai",
              "--base-url", "gopher://x", "--api-key-env", "K"],
    )  # fmt: skip
    assert bad_url.exit_code == 1 and "base_url" in bad_url.output
    assert _add(runner, "--api-key-stdin").exit_code == 0
    taken = _add(runner, "--api-key-stdin")
    assert taken.exit_code == 1 and "already exists" in taken.output
    assert KEY not in neither.output + both.output + taken.output


def test_remove(app, runner):
    assert _add(runner, "--api-key-stdin").exit_code == 0
    removed = runner.invoke(
        main, args=["connections", "remove", "--project", "acme", "--name", "main"]
    )
    assert removed.exit_code == 0 and "removed main" in removed.output
    assert runner.invoke(main, args=["connections", "list"]).output == ""
    again = runner.invoke(
        main, args=["connections", "remove", "--project", "acme", "--name", "main"]
    )
    assert again.exit_code == 1 and "no connection" in again.output


def test_rotate_after_the_secret_key_changed(app, runner):
    assert _add(runner, "--api-key-stdin", "--header", "X-Team: blue").exit_code == 0
    assert _add(runner, "--api-key-env", "SOME_VAR", key=None, name="env-only").exit_code == 0
    old = app.config["SECRET_KEY"]
    app.config["SECRET_KEY"] = "the-new-secret-key"
    # Not listed as previous: nothing can be re-encrypted, and the command says which.
    failed = runner.invoke(main, args=["connections", "rotate"])
    assert failed.exit_code == 1 and "acme/main" in failed.output
    assert "env-only" not in failed.output  # no stored secret, nothing to decrypt
    app.config["PREVIOUS_SECRET_KEYS"] = (old,)
    rotated = runner.invoke(main, args=["connections", "rotate"])
    assert rotated.exit_code == 0 and "re-encrypted 1 connections" in rotated.output
    app.config["PREVIOUS_SECRET_KEYS"] = ()
    resolved = _resolve(app)
    assert resolved.api_key == KEY and resolved.headers == {"X-Team": "blue"}
