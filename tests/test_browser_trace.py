"""The trace view in a real browser (Debian's Chromium through Playwright): a conversation of two
traces shows two trees, each under its header, each row indented by its depth (the computed
padding grows with it), its timing bar drawn, a subtree folding and unfolding (a folded inner
row stays folded when its parent unfolds), errors marked. Light and dark screenshots go to
``test-artifacts/``.

Marked ``browser``: skipped where /usr/bin/chromium is missing, except in CI. SQLite only (the
HTML tests cover PostgreSQL)."""

from __future__ import annotations

import re

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    chromium_fixture,
    dev_app_config_fixture,
    playwright_expect,
    scheme_fixture,
    tab_fixture,
)

from tests.api_support import raw_rows
from tests.otlp_support import T0, agent_run, hex_id, make_span, traces_protobuf

pytestmark = [pytest.mark.browser, SQLITE_ONLY]

expect = playwright_expect()


def _export(client, key, spans) -> None:
    response = client.post(
        "/v1/traces",
        data=traces_protobuf(spans),
        headers={"Content-Type": "application/x-protobuf", **key.headers},
    )
    assert response.status_code == 200


def two_traces(conversation: str) -> list:
    """Two agent runs of one conversation, two seconds apart; under the first run's first tool
    an HTTP call, and under that a lookup that failed."""
    first = agent_run(1, rounds=2, conversation=conversation)
    second = agent_run(2, rounds=3, conversation=conversation, start=T0 + 2_000_000_000)
    tool = next(s for s in first.spans if s.name.startswith("execute_tool"))
    http = make_span(
        1, 1901, "GET api.weather.test/paris", tool.start_ns + 500, tool.end_ns - 500, {}, 1100,
        kind=3,
    )  # fmt: skip
    lookup = make_span(
        1, 1902, "dns lookup", http.start_ns + 100, http.start_ns + 2_000, {}, 1901, status=2
    )
    return [*first.spans, http, lookup, *second.spans]


def test_two_traces_are_two_folding_trees_with_waterfalls(app, client, project_key, tab, scheme):
    page, watch = tab
    spans = two_traces(f"two-traces-{scheme}")
    _export(client, project_key, spans)
    conversation_id = raw_rows(
        app, f"SELECT id FROM conversation WHERE external_id = 'two-traces-{scheme}'"
    )[0][0]
    page.goto(f"/conversations/{conversation_id}/trace")
    groups = page.locator("details.trace-group")
    expect(groups).to_have_count(2)
    expect(page.locator("tr.trace-span")).to_have_count(len(spans))
    expect(groups.nth(0).locator(".trace-head")).to_contain_text("7 spans")
    expect(groups.nth(0).locator(".trace-head")).to_contain_text("1 error")
    expect(groups.nth(1).locator(".trace-head")).to_contain_text("after the first trace")

    def row(span_id: int):
        return page.locator(f'tr[data-span-id="{hex_id(span_id, 16)}"]')

    def padding(span_id: int) -> float:
        cell = row(span_id).locator("td.trace-name")
        return float(cell.evaluate("c => getComputedStyle(c).paddingLeft").removesuffix("px"))

    # Indentation shows: agent (0) < tool (1) < HTTP (2) < lookup (3).
    depths = [padding(n) for n in (1001, 1100, 1901, 1902)]
    assert depths == sorted(depths) and len(set(depths)) == 4, depths
    # Every bar is drawn, inside its lane; the agent's spans its whole trace.
    widths = page.locator(".trace-bar").evaluate_all(
        "bars => bars.map(b => [b.getBoundingClientRect().width,"
        " b.parentElement.getBoundingClientRect().width])"
    )
    assert len(widths) == len(spans)
    assert all(1 <= w <= lane + 0.5 for w, lane in widths), widths
    agent_bar = row(1001).locator(".trace-bar")
    lane = row(1001).locator(".trace-track").bounding_box()
    assert agent_bar.bounding_box()["width"] > 0.95 * lane["width"]
    assert "starts at" in agent_bar.get_attribute("title")
    assert "lasts" in agent_bar.get_attribute("title")
    expect(row(1902)).to_have_class(re.compile(r"\btrace-error\b"))
    watch.shot(f"trace-two-traces-{scheme}")
    page.set_viewport_size({"width": 1024, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024  # no sideways scroll
    watch.shot(f"trace-two-traces-1024-{scheme}")
    page.set_viewport_size({"width": 1400, "height": 900})

    # Fold the HTTP call, then the tool: both levels go; unfolding the tool keeps HTTP folded.
    row(1901).locator("[data-trace-toggle]").click()
    expect(row(1902)).to_be_hidden()
    expect(row(1901)).to_be_visible()
    tool_toggle = row(1100).locator("[data-trace-toggle]")
    tool_toggle.click()
    expect(tool_toggle).to_have_attribute("aria-expanded", "false")
    expect(row(1100)).to_have_class(re.compile(r"\btrace-hides-error\b"))  # the lookup failed
    expect(row(1901)).to_be_hidden()
    expect(row(1101)).to_be_visible()  # the tool beside it is no child of it
    tool_toggle.click()
    expect(row(1901)).to_be_visible()
    expect(row(1100)).not_to_have_class(re.compile(r"\btrace-hides-error\b"))
    expect(row(1902)).to_be_hidden()
    # Folding the agent folds its whole trace but the header; the second trace is untouched.
    row(1001).locator("[data-trace-toggle]").click()
    expect(groups.nth(0).locator("tr.trace-span:visible")).to_have_count(1)
    expect(groups.nth(1).locator("tr.trace-span:visible")).to_have_count(
        groups.nth(1).locator("tr.trace-span").count()
    )
    # A span's attributes still open from its name.
    row(2001).locator("summary").click()
    expect(row(2001).locator(".trace-attributes")).to_contain_text("gen_ai.agent.name")
    watch.shot(f"trace-folded-{scheme}")
    # The whole trace folds under its header.
    groups.nth(1).locator(".trace-head").click()
    expect(groups.nth(1).locator("tr.trace-span").first).to_be_hidden()


def test_without_script_the_tree_is_shown_whole(app, client, project_key, chromium, live_server):
    spans = two_traces("no-script")
    _export(client, project_key, spans)
    conversation_id = raw_rows(app, "SELECT id FROM conversation WHERE external_id = 'no-script'")[
        0
    ][0]
    context = chromium.new_context(base_url=live_server, java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"/conversations/{conversation_id}/trace")
        expect(page.locator("tr.trace-span:visible")).to_have_count(len(spans))
        expect(page.locator("[data-trace-toggle]:visible")).to_have_count(0)
    finally:
        context.close()
