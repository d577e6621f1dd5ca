"""OTLP conversations in a real browser (Debian's Chromium through Playwright): a run exported in
two parts fills in on the open page, calls without content are labelled with the hint, and the
trace view opens from the page. Light and dark screenshots go to ``test-artifacts/``.

Marked ``browser``: skipped where /usr/bin/chromium is missing, except in CI. SQLite only (the
HTML tests cover PostgreSQL)."""

from __future__ import annotations

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    PageWatch,
    chromium_fixture,
    new_page,
    playwright_expect,
    scheme_fixture,
    screenshot,
    tab_fixture,
)

from tests.api_support import raw_rows
from tests.otlp_support import agent_run, traces_protobuf

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()


@pytest.fixture
def app_config():
    return {"DEV": True, "LIVE_POLL_SECONDS": 0.3}


def _export(client, key, spans) -> None:
    response = client.post(
        "/v1/traces",
        data=traces_protobuf(spans),
        headers={"Content-Type": "application/x-protobuf", **key.headers},
    )
    assert response.status_code == 200


def _conversation_id(app, external_id: str) -> int:
    return raw_rows(app, f"SELECT id FROM conversation WHERE external_id = '{external_id}'")[0][0]


def test_a_run_fills_in_live_and_the_trace_view_opens(app, client, project_key, tab, scheme):
    page, watch = tab
    run = agent_run(1, rounds=3, parallel=2, agent=False, conversation=f"weather-{scheme}")
    llm_spans = [s for s in run.spans if s.name.startswith("chat")]
    _export(client, project_key, llm_spans[:1])  # round 0 arrives first, asking for tools
    conversation_id = _conversation_id(app, f"weather-{scheme}")
    page.goto(f"/conversations/{conversation_id}")
    expect(page.locator(".badge.source-otlp").first).to_have_text("OTLP")
    expect(page.locator(".badge-run-in_progress")).to_be_visible()
    _export(client, project_key, [s for s in run.spans if s not in llm_spans[:1]])
    # The live poll swaps the run in place: results and the final answer fill in.
    expect(page.locator(".badge-run-in_progress")).to_have_count(0)
    expect(page.locator(".final")).to_contain_text("Sunny")
    expect(page.locator(".call-card")).to_have_count(4)
    screenshot(page, f"otlp-conversation-{scheme}")
    page.click("a.trace-link")
    expect(page.locator("tr.trace-span")).to_have_count(len(run.spans))
    page.locator("tr.trace-llm summary").first.click()
    expect(page.locator("tr.trace-llm .trace-attributes").first).to_contain_text(
        "gen_ai.usage.input_tokens"
    )
    screenshot(page, f"otlp-trace-{scheme}")
    watch.assert_clean()


def test_calls_without_content_show_the_label_and_the_hint(
    app, client, project_key, chromium, live_server
):
    run = agent_run(2, rounds=2, parallel=2, content=False, conversation="no-content")
    for span in run.spans:
        span.scope_name = "opentelemetry.util.genai.handler"
    _export(client, project_key, run.spans)
    with new_page(chromium, base_url=live_server) as page:
        watch = PageWatch(page)
        page.goto(f"/conversations/{_conversation_id(app, 'no-content')}")
        expect(page.locator(".otlp-hint")).to_contain_text(
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
        )
        expect(page.locator(".badge-not-captured")).to_have_count(2)
        expect(page.locator(".badge-no-response")).to_have_count(0)
        screenshot(page, "otlp-no-content")
        watch.assert_clean()
