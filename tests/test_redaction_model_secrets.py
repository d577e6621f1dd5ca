"""A model connection's key and header values never leave the server in plain text (issue 25,
docs/runs.md 'Model connections'): typed in through the API, the Settings page and the CLI,
then used, tested against a fake provider that echoes them in its 401, made unreadable by a
changed SECRET_KEY, they are found in no answer, no page, no CLI output, no log record (every
logger at DEBUG, the SDKs' and httpx's included), no error message, and neither in the SQLite
file nor in a pg_dump of the PostgreSQL database."""

from __future__ import annotations

import logging

import pytest
from dashboard_support import HTMX, csrf_token, log_in
from fake_model_server import fake_model_server

from tests.stored_bytes import database_bytes
from webapp.cli import main
from webapp.db import db
from webapp.services import model_connections as mc

# One per way in, so that a find says which way leaked.
API_KEY = "sk-LEAKCHECK-api-71c3d9e2f4"
API_HEADER = "hdr-LEAKCHECK-api-0b8a6f"
PAGE_KEY = "sk-LEAKCHECK-page-5e2a7c9b13"
PAGE_HEADER = "hdr-LEAKCHECK-page-9d1e4c"
CLI_KEY = "sk-LEAKCHECK-cli-3f6b8d0a2e"
CLI_HEADER = "hdr-LEAKCHECK-cli-7a2c5e"
SECRETS = (API_KEY, API_HEADER, PAGE_KEY, PAGE_HEADER, CLI_KEY, CLI_HEADER)


def _assert_clean(where: str, text: str) -> None:
    found = [s for s in SECRETS if s in text]
    assert not found, f"{where} holds {found}"


def test_no_secret_reaches_an_answer_a_log_or_the_database(
    app, client, runner, project_key, caplog, capfd
):
    caplog.set_level(logging.DEBUG)
    log_in(app, client)
    with client.session_transaction() as session:
        session["project_id"] = project_key.project_id
    seen: list[tuple[str, str]] = []

    def keep(where: str, response) -> None:
        seen.append((where, response.get_data(as_text=True)))

    with fake_model_server() as fake:
        fake.fail_with = 401  # echoes the key it was sent in its message
        # The API, with a dashboard login.
        token = csrf_token(client)
        created = client.post(
            "/api/v1/model-connections",
            json={
                "name": "via-api",
                "kind": "openai",
                "base_url": fake.openai_base_url,
                "api_key": API_KEY,
                "headers": {"X-Gateway": API_HEADER},
            },
            headers={"X-CSRFToken": token},
        )
        assert created.status_code == 201, created.data
        keep("POST answer", created)
        keep(
            "422 answer",
            client.post(
                "/api/v1/model-connections",
                json={"name": "bad", "kind": "openai", "base_url": "ftp://x", "api_key": API_KEY},
                headers={"X-CSRFToken": token},
            ),
        )
        keep(
            "409 answer",
            client.post(
                "/api/v1/model-connections",
                json={"name": "via-api", "kind": "openai", "base_url": fake.openai_base_url,
                      "api_key": API_KEY},
                headers={"X-CSRFToken": token},
            ),
        )  # fmt: skip
        keep("403 answer", client.post(
            "/api/v1/model-connections",
            json={"name": "k", "kind": "openai", "base_url": fake.url, "api_key": API_KEY},
            headers=project_key.headers,
        ))  # fmt: skip
        # The page.
        form = {
            "csrf_token": token,
            "name": "via-page",
            "kind": "anthropic",
            "base_url": fake.anthropic_base_url,
            "api_key": PAGE_KEY,
            "headers": f"X-Gateway: {PAGE_HEADER}",
        }
        added = client.post("/settings/connections", data=form)
        assert added.status_code == 302
        keep("page 422", client.post("/settings/connections", data={**form, "name": "bad name"}))
        keep("page 409", client.post("/settings/connections", data=form))
        # The CLI.
        result = runner.invoke(
            main,
            args=["connections", "add", "--project", "default", "--name", "via-cli",
                  "--kind", "openai", "--base-url", fake.openai_base_url, "--api-key-stdin",
                  "--header", f"X-Gateway: {CLI_HEADER}"],
            input=CLI_KEY + "\n",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        seen.append(("cli add", result.output))
        seen.append(("cli list", runner.invoke(main, args=["connections", "list"]).output))
        # Used: the Test button against a provider that answers 401 with the key in it.
        for name in ("via-api", "via-page", "via-cli"):
            url = f"/settings/connections/{name}/test"
            tested = client.post(url, data={"csrf_token": token}, headers=HTMX)
            assert b"401" in tested.data, tested.data
            keep(f"test {name}", tested)
            keep(f"test {name} page", client.post(url, data={"csrf_token": token}))
        assert len(fake.seen) == 6
        # What a reader sees.
        for url in ("/settings", "/settings.json", "/api/v1/model-connections"):
            keep(url, client.get(url))
        keep("key list", client.get("/api/v1/model-connections", headers=project_key.headers))
        keep("openapi", client.get("/api/openapi.json"))

    # The secrets went where they belong: to the provider, and resolved for the SDK.
    with app.app_context():
        resolved = mc.resolve_connection(db.session, project_key.project_id, "via-cli")
        assert resolved.api_key == CLI_KEY and resolved.headers == {"X-Gateway": CLI_HEADER}
        seen.append(("repr", repr(resolved)))
        db.session.rollback()
        # A changed SECRET_KEY: the error says what to do, and names no secret.
        app.config["SECRET_KEY"] = "another-secret-key"
        for name in ("via-api", "via-page", "via-cli"):
            with pytest.raises(mc.ConnectionUnusable) as failure:
                mc.resolve_connection(db.session, project_key.project_id, name)
            seen.append((f"unusable {name}", str(failure.value)))
        db.session.rollback()
    # The session cookie was signed with the old key: log in again.
    log_in(app, client)
    with client.session_transaction() as session:
        session["project_id"] = project_key.project_id
    keep("settings, unreadable", client.get("/settings"))
    keep("test, unreadable", client.post(
        "/settings/connections/via-api/test", data={"csrf_token": csrf_token(client)},
        headers=HTMX,
    ))  # fmt: skip
    rotate = runner.invoke(main, args=["connections", "rotate"])
    assert rotate.exit_code != 0 and "via-api" in rotate.output
    seen.append(("cli rotate", rotate.output))

    for where, text in seen:
        _assert_clean(where, text)
    logged = "\n".join(
        f"{r.name} {r.getMessage()} {r.args!r} {getattr(r, 'exc_text', '')}" for r in caplog.records
    )
    assert logged, "the log capture caught nothing: the check would prove nothing"
    _assert_clean("the log", logged)
    out, err = capfd.readouterr()
    _assert_clean("stdout/stderr", out + err)

    stored = database_bytes(app)
    assert b"via-page" in stored and b"gAAAAA" in stored  # the rows, with their Fernet tokens
    for secret in SECRETS:
        assert secret.encode() not in stored, f"{secret} is in the database as stored"
