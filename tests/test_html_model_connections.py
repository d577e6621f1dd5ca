"""The Settings page's model connections (issue 25): add one with a typed-in key or an
environment variable, delete it, and test it against a fake provider on loopback through the
real SDKs; the key is never on a page, in a fragment or in the JSON twin."""

from __future__ import annotations

import pytest
from dashboard_support import HTMX, csrf_token, dashboard_fixture, page  # noqa: F401
from fake_model_server import fake_model_server
from html_dom import parse

SECRET = "sk-PAGESECRET-9d8e7f6a5b"
HEADER_SECRET = "gw-HEADERSECRET-3c2b1a"


def _add(dashboard, **overrides):
    form = {
        "csrf_token": csrf_token(dashboard),
        "name": "main",
        "kind": "openai",
        "base_url": "https://api.openai.com/v1",
        "default_model": "gpt-4.1-mini",
        "api_key": SECRET,
        "api_key_env": "",
        "headers": f"X-Gateway-Key: {HEADER_SECRET}",
    }
    form.update(overrides)
    return dashboard.post("/settings/connections", data=form)


def test_a_connection_added_on_the_page_is_listed_without_its_key(dashboard):
    added = _add(dashboard)
    assert added.status_code == 302 and added.headers["Location"].endswith("#connections")
    settings = dashboard.get("/settings")
    doc = page(settings)
    rows = doc.select("#connections tbody tr")
    assert len(rows) == 1
    text = rows[0].text
    assert "main" in text and "https://api.openai.com/v1" in text and "gpt-4.1-mini" in text
    assert "stored (encrypted)" in text and "X-Gateway-Key" in text
    twin = dashboard.get("/settings.json")
    (item,) = twin.get_json()["model_connections"]
    assert item["secret_source"] == "stored" and item["header_names"] == ["X-Gateway-Key"]
    for answer in (settings, twin):
        body = answer.get_data(as_text=True)
        assert SECRET not in body and HEADER_SECRET not in body


def test_the_key_field_is_a_password_field_and_a_mistake_does_not_echo_the_key(dashboard):
    doc = page(dashboard.get("/settings"))
    (field,) = doc.select("#connections input[name=api_key]")
    assert field.get("type") == "password"
    refused = _add(dashboard, base_url="ftp://example.com")
    assert refused.status_code == 422
    body = refused.get_data(as_text=True)
    assert "base_url" in body and "http://" in body
    assert SECRET not in body and HEADER_SECRET not in body
    # What was typed comes back, but the key and the headers do not.
    doc = parse(refused.data)
    assert doc.select("#connections input[name=name]")[0].get("value") == "main"
    assert not doc.select("#connections input[name=api_key]")[0].get("value")


def test_an_environment_variable_and_delete(dashboard):
    assert _add(dashboard, api_key="", api_key_env="OPENAI_API_KEY", headers="").status_code == 302
    doc = page(dashboard.get("/settings"))
    assert "env:OPENAI_API_KEY" in doc.select("#connections tbody tr")[0].text
    deleted = dashboard.post(
        "/settings/connections/main/delete", data={"csrf_token": csrf_token(dashboard)}
    )
    assert deleted.status_code == 302
    assert not page(dashboard.get("/settings")).select("#connections tbody tr")
    missing = dashboard.post(
        "/settings/connections/main/delete", data={"csrf_token": csrf_token(dashboard)}
    )
    assert missing.status_code == 404


def test_posts_without_the_csrf_token_are_refused(dashboard):
    refused = dashboard.post(
        "/settings/connections",
        data={"name": "x", "kind": "openai", "base_url": "https://a.example/v1"},
    )
    assert refused.status_code == 400
    assert not page(dashboard.get("/settings")).select("#connections tbody tr")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_test_button_lists_the_providers_models_or_shows_its_error(dashboard, kind):
    with fake_model_server() as fake:
        base = fake.openai_base_url if kind == "openai" else fake.anthropic_base_url
        assert _add(dashboard, kind=kind, base_url=base).status_code == 302
        token = csrf_token(dashboard)
        ok = dashboard.post(
            "/settings/connections/main/test", data={"csrf_token": token}, headers=HTMX
        )
        assert ok.status_code == 200
        fragment = parse(ok.data)
        status = fragment.select(".connection-test")[0]
        assert status.get("data-ok") == "true", ok.get_data(as_text=True)
        assert ("gpt-fake-1" if kind == "openai" else "claude-fake-1") in status.text
        # The provider got the key and the extra header, through the SDK.
        seen = fake.seen[-1]
        assert seen["x-gateway-key"] == HEADER_SECRET
        assert SECRET in (seen.get("authorization", "") + seen.get("x-api-key", ""))
        fake.fail_with = 401
        failed = dashboard.post(
            "/settings/connections/main/test", data={"csrf_token": token}, headers=HTMX
        )
        status = parse(failed.data).select(".connection-test")[0]
        assert status.get("data-ok") == "false"
        assert "401" in status.text and "Incorrect API key provided" in status.text
        # The fake echoed the key in its message: taken out.
        assert SECRET not in failed.get_data(as_text=True)
        # Without htmx: the whole page, with the result in the connection's row.
        whole = dashboard.post("/settings/connections/main/test", data={"csrf_token": token})
        assert whole.status_code == 200
        assert "401" in parse(whole.data).select("#connections .connection-test")[0].text
        assert SECRET not in whole.get_data(as_text=True)


def test_the_test_button_says_what_is_unusable(dashboard, monkeypatch):
    monkeypatch.delenv("TS_HTML_NO_SUCH_KEY", raising=False)
    _add(dashboard, api_key="", api_key_env="TS_HTML_NO_SUCH_KEY", headers="")
    answer = dashboard.post(
        "/settings/connections/main/test",
        data={"csrf_token": csrf_token(dashboard)},
        headers=HTMX,
    )
    assert "TS_HTML_NO_SUCH_KEY is not set" in parse(answer.data).text


def test_a_connection_to_a_closed_port_fails_clearly(dashboard):
    assert _add(dashboard, base_url="http://127.0.0.1:9/v1").status_code == 302
    answer = dashboard.post(
        "/settings/connections/main/test",
        data={"csrf_token": csrf_token(dashboard)},
        headers=HTMX,
    )
    text = parse(answer.data).text
    assert "could not connect" in text and SECRET not in text
