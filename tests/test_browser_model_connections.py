"""Settings → Model connections in Chromium, light and dark (issue 25): add a connection with a
typed-in key, press Test (htmx, no page load) against a fake provider on loopback, see ok, then
the provider's 401 with the key it echoed taken out.

Marked ``browser`` (see tests/browser_support.py). Screenshots go to
``test-artifacts/model-connections-*.png`` for a person to look at.
"""

from __future__ import annotations

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    dev_app_config_fixture,
    playwright_expect,
    scheme_fixture,
    tab_fixture,
)
from fake_model_server import fake_model_server

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()

SECRET = "sk-BROWSERSECRET-6a4c2e0b8d"


def test_add_and_test_a_connection(tab, project_key, scheme):
    page, watch = tab
    with fake_model_server() as fake:
        page.goto("/settings#connections")
        section = page.locator("#connections")
        section.locator("input[name=name]").fill("local")
        section.locator("select[name=kind]").select_option("openai")
        section.locator("input[name=base_url]").fill(fake.openai_base_url)
        section.locator("input[name=default_model]").fill("gpt-fake-1")
        key_field = section.locator("input[name=api_key]")
        expect(key_field).to_have_attribute("type", "password")
        key_field.fill(SECRET)
        section.get_by_role("button", name="Add connection").click()
        row = section.locator("tbody tr", has_text="local")
        expect(row).to_contain_text("stored (encrypted)")
        expect(row).to_contain_text(fake.openai_base_url)

        # Test: the answer replaces the row's result in place; the page is not reloaded.
        page.evaluate("() => { window.__sameDocument = true }")
        row.get_by_role("button", name="Test").click()
        result = row.locator(".connection-result .connection-test")
        expect(result).to_have_attribute("data-ok", "true")
        expect(result).to_contain_text("gpt-fake-1")
        assert page.evaluate("() => window.__sameDocument") is True
        watch.shot(f"model-connections-ok-{scheme}", full_page=False)

        fake.fail_with = 401
        row.get_by_role("button", name="Test").click()
        expect(result).to_have_attribute("data-ok", "false")
        expect(result).to_contain_text("401")
        expect(result).to_contain_text("Incorrect API key provided: [redacted]")
        assert page.evaluate("() => window.__sameDocument") is True
        section.scroll_into_view_if_needed()
        watch.shot(f"model-connections-401-{scheme}", full_page=False)
        assert SECRET not in page.content()
        assert len(fake.seen) == 2
