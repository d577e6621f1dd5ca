"""Totals above the conversations list and the calls explorer: how many rows match the current
filters, one capped COUNT for a new page or search (not for the next rows nor the JSON twin)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factories as f
import pytest
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401

from webapp.queries import call_explorer, conversation_list


@pytest.fixture
def listed(app, project_key):
    now = datetime.now(UTC)
    with data(app):
        for i in range(3):
            f.simple_conversation(project_key.project_id, f"c{i}", at=now - timedelta(days=2 * i))
        f.conversation(project_key.project_id, "old", at=now - timedelta(days=40))


def _total(doc) -> str:
    return " ".join(doc.one(".list-total").text.split())


def test_conversations_list_says_how_many_match(app, dashboard, listed):
    assert _total(page(dashboard.get("/conversations"))) == "4 conversations"
    assert _total(page(dashboard.get("/conversations?range=24h"))) == "1 conversation matches"
    fragment = page(dashboard.get("/conversations?range=7d", headers=HTMX))
    assert _total(fragment) == "3 conversations match"
    assert _total(page(dashboard.get("/conversations?q=nothing-like-it"))) == (
        "0 conversations match"
    )
    # Sorting is not filtering.
    assert _total(page(dashboard.get("/conversations?sort=oldest"))) == "4 conversations"
    # The next rows (a cursor) and the JSON twin carry no total.
    body = dashboard.get("/conversations.json?limit=2").get_json()
    assert "total" not in body
    rows = page(dashboard.get(f"/conversations?cursor={body['next_cursor']}", headers=HTMX))
    assert not rows.select(".list-total")


def test_calls_explorer_says_how_many_match(app, dashboard, listed):
    assert _total(page(dashboard.get("/calls"))) == "9 calls"
    assert _total(page(dashboard.get("/calls?range=24h"))) == "3 calls match"
    assert _total(page(dashboard.get("/calls?tool=nope", headers=HTMX))) == "0 calls match"
    assert "total" not in dashboard.get("/calls.json").get_json()


def test_a_total_over_the_cap_reads_cap_plus(app, dashboard, listed, monkeypatch):
    monkeypatch.setattr(conversation_list, "TOTAL_CAP", 2)
    monkeypatch.setattr(call_explorer, "TOTAL_CAP", 2)
    monkeypatch.setattr(conversation_list.count_conversations, "__defaults__", (2,))
    monkeypatch.setattr(call_explorer.count_calls, "__kwdefaults__", {"cap": 2})
    assert _total(page(dashboard.get("/conversations"))) == "2+ conversations"
    assert _total(page(dashboard.get("/calls?range=24h"))) == "2+ calls match"


def test_the_counts_are_capped_in_sql(app, project_key, listed):
    with app.app_context():
        filters = conversation_list.ListFilters()
        assert conversation_list.count_conversations(project_key.project_id, filters, cap=2) == 3
        assert conversation_list.count_conversations(project_key.project_id, filters) == 4
        calls = call_explorer.CallFilters()
        now = datetime.now(UTC)
        assert call_explorer.count_calls(
            project_key.project_id, calls, now=now, token_cap=None, cap=5
        ) == 6
        count = call_explorer.count_calls(project_key.project_id, calls, now=now, token_cap=None)
        assert count == 9


def test_a_first_page_holding_every_match_is_its_own_total(app, dashboard, listed, count_queries):
    """A filter matching fewer calls than a page (a rare status: none at all) is counted from
    the page, not by a second walk of the project's calls (0.6 s at 1,000,000 calls; issue
    24); a fuller list is still counted."""
    for url, total in (("/calls?status=no-response", "0 calls match"), ("/calls", "9 calls")):
        dashboard.get(url)
        with count_queries() as counter:
            doc = page(dashboard.get(url))
        assert _total(doc) == total
        assert not [s for s in counter.statements if "count(*)" in s.lower()], url
    with count_queries() as counter:
        assert _total(page(dashboard.get("/calls?limit=2"))) == "9 calls"
    assert [s for s in counter.statements if "count(*)" in s.lower()]
