"""MCP in a real browser (Debian's Chromium through Playwright), light and dark: the Tools page
leads to the MCP servers page, whose table shows the server with its tools, error rate and
definition tokens; a call that went through MCP says so in its side panel. Screenshots go to
``test-artifacts/``.

Marked ``browser``: skipped where /usr/bin/chromium is missing, except in CI. SQLite only (the
HTML tests cover PostgreSQL)."""

from __future__ import annotations

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    playwright_expect,
    scheme_fixture,
    screenshot,
    tab_fixture,
)

from tests.api_support import raw_rows
from tests.test_html_mcp_servers import _ingest

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()


@pytest.fixture
def app_config():
    return {"DEV": True}


def test_mcp_servers_page_and_the_call_panel(app, client, project_key, tab, scheme):
    page, watch = tab
    _ingest(client, project_key, trace=1, error=True, conversation=f"mcp-{scheme}")
    page.goto("/tools")
    page.click("text=MCP servers")
    expect(page.locator("h1")).to_have_text("MCP servers")
    row = page.locator("tr[data-server='weather-mcp']")
    expect(row).to_be_visible()
    expect(row.locator("a.chip")).to_have_count(2)
    expect(row).to_contain_text("o200k_base")
    expect(row).to_contain_text("50.0%")
    screenshot(page, f"mcp-servers-{scheme}")

    (conversation_id,) = raw_rows(
        app, f"SELECT id FROM conversation WHERE external_id = 'mcp-{scheme}'"
    )[0]
    page.goto(f"/conversations/{conversation_id}")
    page.locator(".call-card", has_text="tool_1").first.click()
    facts = page.locator("#detail .detail [data-mcp]")
    expect(facts).to_contain_text("weather-mcp")
    expect(facts).to_contain_text("tool_error")
    expect(facts).to_contain_text("JSON-RPC id")
    screenshot(page, f"mcp-call-panel-{scheme}", full_page=False)
    watch.assert_clean()
