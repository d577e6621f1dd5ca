"""The time range picker (``range=1h|24h|7d|30d``, or a custom ``from``/``to``) on the
conversations list, the calls explorer, the tools page and the Costs page, their JSON twins and
``GET /api/v1/calls`` / ``GET /api/v1/conversations``: the same presets, kept in the URL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import factories as f
import pytest
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401

# Conversations (one call and one service call each) this long before the test runs.
AGES = {
    "m30": timedelta(minutes=30),
    "h3": timedelta(hours=3),
    "d3": timedelta(days=3),
    "d20": timedelta(days=20),
    "d60": timedelta(days=60),
}
# What each preset keeps of them.
EXPECTED = {
    "1h": ["m30"],
    "24h": ["m30", "h3"],
    "7d": ["m30", "h3", "d3"],
    "30d": ["m30", "h3", "d3", "d20"],
    "": ["m30", "h3", "d3", "d20", "d60"],
}


@pytest.fixture
def aged(app, project_key):
    now = datetime.now(UTC)
    with data(app):
        for name, age in AGES.items():
            f.simple_conversation(project_key.project_id, name, at=now - age, n_calls=1)


def _rows(doc, results: str) -> list:
    return [r for r in doc.select(f"{results} tbody tr") if "empty-row" not in r.classes]


def _range(preset: str) -> str:
    return f"range={preset}" if preset else ""


@pytest.mark.parametrize("preset", list(EXPECTED))
def test_conversations_list_follows_the_range(app, dashboard, aged, preset):
    body = dashboard.get(f"/conversations.json?{_range(preset)}").get_json()
    assert sorted(row["external_id"] for row in body["data"]) == sorted(EXPECTED[preset])
    assert body["filters"]["range"] == (preset or None)
    doc = page(dashboard.get(f"/conversations?{_range(preset)}"))
    assert len(_rows(doc, "#results")) == len(EXPECTED[preset])
    chosen = doc.one("select[name=range] option[selected]")
    assert chosen.get("value") == preset
    # A preset hides the custom days; "Any time" too.
    assert "hidden" in doc.one(".time-custom").attrs


def test_the_fragment_pushes_the_range_into_the_address_bar(app, dashboard, aged):
    response = dashboard.get("/conversations?range=24h&from=&to=", headers=HTMX)
    assert response.headers["HX-Push-Url"] == "/conversations?range=24h"
    response = dashboard.get("/calls?range=7d&from=&to=&q=", headers=HTMX)
    assert response.headers["HX-Push-Url"] == "/calls?range=7d"


def test_a_preset_replaces_the_custom_days_and_custom_days_still_work(app, dashboard, aged):
    today = datetime.now(UTC).date()
    old = (today - timedelta(days=90)).isoformat()
    body = dashboard.get(f"/conversations.json?range=1h&from={old}").get_json()
    assert [row["external_id"] for row in body["data"]] == ["m30"]
    assert body["filters"]["date_from"] is None
    custom = f"from={(today - timedelta(days=25)).isoformat()}&to={(today - timedelta(days=10))}"
    body = dashboard.get(f"/conversations.json?{custom}").get_json()
    assert [row["external_id"] for row in body["data"]] == ["d20"]
    doc = page(dashboard.get(f"/conversations?{custom}"))
    assert doc.one("select[name=range] option[selected]").attrs.keys() >= {"data-custom"}
    assert "hidden" not in doc.one(".time-custom").attrs


@pytest.mark.parametrize("url", ["/conversations", "/calls", "/tools", "/costs"])
def test_an_unknown_range_is_refused(app, dashboard, url):
    response = dashboard.get(f"{url}.json?range=2w")
    assert response.status_code == 422
    assert "range" in response.get_json()["error"]["message"]


@pytest.mark.parametrize("preset", list(EXPECTED))
def test_calls_explorer_follows_the_range(app, dashboard, aged, preset):
    body = dashboard.get(f"/calls.json?{_range(preset)}").get_json()
    names = sorted(item["conversation"]["id"] for item in body["data"])
    assert names == sorted(EXPECTED[preset])
    doc = page(dashboard.get(f"/calls?{_range(preset)}"))
    assert len(_rows(doc, "#calls-results")) == len(EXPECTED[preset])
    assert doc.one("select[name=range] option[selected]").get("value") == preset


@pytest.mark.parametrize("preset", list(EXPECTED))
def test_tools_page_counts_the_calls_in_the_range(app, dashboard, aged, preset):
    body = dashboard.get(f"/tools.json?{_range(preset)}").get_json()
    assert [(t["function_name"], t["calls"]) for t in body["data"]] == [
        ("lookup", len(EXPECTED[preset]))
    ]
    doc = page(dashboard.get(f"/tools?{_range(preset)}"))
    assert doc.select("#tools-results tbody tr td.num")[0].text == str(len(EXPECTED[preset]))
    assert doc.one("select[name=range] option[selected]").get("value") == preset
    # Sorting keeps the range.
    sort_link = next(a.get("href") for a in doc.select("th a") if "sort=name" in a.get("href"))
    assert (f"range={preset}" in sort_link) == bool(preset)


def test_tools_page_says_when_the_range_has_no_calls(app, dashboard, project_key):
    with data(app):
        f.simple_conversation(
            project_key.project_id, "old", at=datetime.now(UTC) - timedelta(days=2), n_calls=1
        )
    doc = page(dashboard.get("/tools?range=1h"))
    assert doc.one("#tools-results .empty").text == "No tool calls in this time range."


def _cost(body) -> Decimal:
    rows = body["charts"]["cost"]["rows"]
    return sum((Decimal(str(r["cost_usd"] or 0)) for r in rows), Decimal(0))


@pytest.mark.parametrize("preset", ["1h", "24h", "7d", "30d"])
def test_costs_follow_the_range(app, dashboard, aged, preset):
    body = dashboard.get(f"/costs.json?range={preset}").get_json()
    assert body["filters"]["range"] == preset and "from" not in body["filters"]
    assert _cost(body) == Decimal("0.0038") * len(EXPECTED[preset])
    doc = page(dashboard.get(f"/costs?range={preset}"))
    assert doc.one("select[name=range] option[selected]").get("value") == preset
    # The charts always cover a period: there is no "Any time".
    assert "Any time" not in [o.text for o in doc.select("select[name=range] option")]


def test_costs_custom_days_are_as_before(app, dashboard, aged):
    doc = page(dashboard.get("/costs"))
    assert doc.one("select[name=range] option[selected]").attrs.keys() >= {"data-custom"}
    assert doc.one(".time-custom input[name=from]").get("value")


def test_api_lists_take_the_range(app, client, project_key, aged):
    headers = project_key.headers
    calls = client.get("/api/v1/calls?range=24h", headers=headers).get_json()
    assert sorted(c["conversation"]["id"] for c in calls["data"]) == ["h3", "m30"]
    convs = client.get("/api/v1/conversations?range=7d", headers=headers).get_json()
    assert sorted(c["id"] for c in convs["data"]) == ["d3", "h3", "m30"]
    bad = client.get("/api/v1/calls?range=1y", headers=headers)
    assert bad.status_code == 422
    assert client.get("/api/v1/conversations?range=1y", headers=headers).status_code == 422
