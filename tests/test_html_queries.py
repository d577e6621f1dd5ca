"""Every page runs a number of SQL statements that does not grow with the data, and the
conversation page's first response stays small at 10,000 calls.

Each test measures a page, adds much more data, and measures again: the counts must be equal
and under a small bound. The bounds are the measured counts, so a new query shows up here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factories as f
from dashboard_support import (  # noqa: F401
    HTMX,
    LOGIN_CHECK,
    count_get,
    dashboard_fixture,
    data,
    page,
)
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation

# Every request looks up the session's project (1); full pages also list the projects for the
# switcher (1). The rest is the page's own, listed at each assertion.
FIRST_RESPONSE_LIMIT = 100 * 1024


def many_conversations(app, project_id: int, n: int, start: int = 0) -> None:
    now = datetime.now(UTC)
    with data(app):
        for i in range(start, start + n):
            f.simple_conversation(project_id, f"c{i}", at=now - timedelta(seconds=i), n_calls=4)


def test_list_page_queries_do_not_grow_with_conversations(
    app, dashboard, project_key, count_queries
):
    many_conversations(app, project_key.project_id, 1)
    small, _ = count_get(dashboard, count_queries, "/conversations")
    fragment_small, _ = count_get(dashboard, count_queries, "/conversations?q=c", headers=HTMX)
    many_conversations(app, project_key.project_id, 30, start=1)
    large, response = count_get(dashboard, count_queries, "/conversations")
    fragment_large, _ = count_get(dashboard, count_queries, "/conversations?q=c", headers=HTMX)
    assert len(page(response).select("tr[data-row-id]")) == 31
    # Newest activity (for the live poll), the page, its aggregates (one statement), the total
    # (one capped COUNT), channels for the filter.
    assert small == large == 7 + LOGIN_CHECK
    assert fragment_small == fragment_large == 5 + LOGIN_CHECK
    # Sorted by an aggregate: no live poll, no switcher, no channels.
    sorted_by_tokens = count_get(dashboard, count_queries, "/conversations.json?sort=tokens")
    assert sorted_by_tokens[0] == 3 + LOGIN_CHECK


def test_conversation_page_queries_do_not_grow_with_calls(
    app, dashboard, project_key, count_queries
):
    with data(app):
        small_id = f.big_conversation(
            project_key.project_id, "small", turns=1, rounds=2, parallel=5
        ).id
        large_id = f.big_conversation(
            project_key.project_id, "large", turns=20, rounds=10, parallel=5
        ).id
    small, _ = count_get(dashboard, count_queries, f"/conversations/{small_id}")
    large, response = count_get(dashboard, count_queries, f"/conversations/{large_id}")
    # Conversation, newest call id, messages, first calls (one window query), usage,
    # the aggregates for the header (one statement), tools offered, its runs (views.runs).
    assert small == large == 10 + LOGIN_CHECK
    doc = page(response)
    # Turn fragments and run chunks: constant too.
    next_page = next(
        n.get("hx-get") for n in doc.select("#timeline .loader") if "cursor=" in n.get("hx-get")
    )
    chunk = doc.select(".run .loader")[0].get("hx-get")
    # A turn page: conversation, newest call id, messages, first calls, usage, turn number.
    assert count_get(dashboard, count_queries, next_page, headers=HTMX)[0] == 7 + LOGIN_CHECK
    # More calls of a run: conversation, message, the calls, usage.
    assert count_get(dashboard, count_queries, chunk, headers=HTMX)[0] == 5 + LOGIN_CHECK


def test_call_detail_and_tools_pages_do_not_grow(app, dashboard, project_key, count_queries):
    with data(app):
        f.big_conversation(project_key.project_id, "a", turns=1, rounds=2, parallel=5)
    with app.app_context():
        call_id = db.session.scalar(select(ToolInvocation.id).limit(1))
    detail_small = count_get(dashboard, count_queries, f"/calls/{call_id}", headers=HTMX)[0]
    tools_small = count_get(dashboard, count_queries, "/tools")[0]
    tool_small = count_get(dashboard, count_queries, "/tools/usage?name=tool_1")[0]
    costs_small = count_get(dashboard, count_queries, "/costs")[0]
    settings_small = count_get(dashboard, count_queries, "/settings")[0]
    with data(app):
        for i in range(5):
            f.big_conversation(project_key.project_id, f"b{i}", turns=5, rounds=10, parallel=8)
    # The call with its message and conversation in one join.
    detail = count_get(dashboard, count_queries, f"/calls/{call_id}", headers=HTMX)[0]
    assert detail == detail_small == 2 + LOGIN_CHECK
    # Aggregates per tool from the roll-ups and one window query for the exact percentiles while
    # the range holds at most 2,000 calls; above that (the 2,000 calls just added) the
    # percentiles come from the roll-ups' sketches instead, one statement more, whatever the size.
    tools = count_get(dashboard, count_queries, "/tools")[0]
    assert (tools_small, tools) == (4 + LOGIN_CHECK, 5 + LOGIN_CHECK)
    # The tool's statistics (two queries), its conversations and how far their walk went.
    tool = count_get(dashboard, count_queries, "/tools/usage?name=tool_1")[0]
    assert tool == tool_small == 6 + LOGIN_CHECK
    # Keys, rules, channels, model connections.
    assert count_get(dashboard, count_queries, "/settings")[0] == settings_small == 6 + LOGIN_CHECK
    # The Costs page belongs to the analytics module; it must not grow either.
    # As /tools: past 2,000 calls in range, the percentiles' sketches are one statement more.
    assert count_get(dashboard, count_queries, "/costs")[0] == costs_small + 1


def test_ten_thousand_calls_open_with_a_small_first_response(
    app, dashboard, project_key, count_queries
):
    with data(app):
        conv_id = f.big_conversation(project_key.project_id, turns=200, rounds=10, parallel=5).id
    queries, response = count_get(dashboard, count_queries, f"/conversations/{conv_id}")
    assert response.status_code == 200
    size = len(response.data)
    assert size < FIRST_RESPONSE_LIMIT, size
    doc = page(response)
    assert doc.one("#conv-summary").text.split()[4:6] == ["10,000", "tool"]
    assert len(doc.select(".call-card")) <= 90
    assert queries == 10 + LOGIN_CHECK  # 9, and the conversation's runs (one statement)
    # So is every lazily loaded page after it.
    url = next(
        n.get("hx-get") for n in doc.select("#timeline .loader") if "cursor=" in n.get("hx-get")
    )
    fragment = dashboard.get(url, headers=HTMX)
    assert len(fragment.data) < FIRST_RESPONSE_LIMIT


def test_tool_cost_chart_reads_stored_costs(app, dashboard, project_key, count_queries):
    """The tool-cost chart sums the stored tool costs: a fixed number of statements whatever the
    number of conversations once they are stored, and a bounded number more while some are
    stale (at most INLINE_MAX replayed: their five loads, then their storing)."""
    from webapp.services import attribution_store

    many_conversations(app, project_key.project_id, 5)
    small = count_get(dashboard, count_queries, "/tools/charts")[0]
    many_conversations(app, project_key.project_id, 30, start=5)
    with count_queries() as counter:
        assert dashboard.get("/tools/charts").status_code == 200
    stale = counter.count
    with app.app_context():
        attribution_store.refresh_stale(project_key.project_id, {})
    # The session's project, the projects for the switcher, the price overrides, tool activity
    # per day (roll-ups), result sizes (two), the stale conversations (none) and the stored
    # tool costs' sums.
    assert count_get(dashboard, count_queries, "/tools/charts")[0] == small == 8 + LOGIN_CHECK
    # Stale (INLINE_MAX of the 30 new ones): their five loads and their pending counts, then the
    # write (which of them still exist, pending counts again, the tool-cost roll-up's rows of
    # them, two deletes, two inserts, the roll-up's upsert).
    assert stale == small + 14, (stale, small)
