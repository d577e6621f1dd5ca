"""The time range picker (``range=1h|24h|7d|30d``, or a custom ``from``/``to``) on the
conversations list, the calls explorer, the tools page and the Costs page, their JSON twins and
``GET /api/v1/calls`` / ``GET /api/v1/conversations``: the same presets, kept in the URL."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
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


# --- A preset starts at the start of its UTC hour (issue 24) -----------------------------------


def test_every_parse_of_a_preset_starts_it_at_the_start_of_the_utc_hour():
    """A preset of "last 24 h" at 14:37 counts from 14:00 the day before on every page and in
    the API: the explorer's parse (the calls explorer, the tools pages, the calls API), the
    charts' (the Costs page, the tool charts) and the conversations list's."""
    from webapp.analytics import filters as chart_filters
    from webapp.queries import call_explorer
    from webapp.views.conversations import list_filters

    now = datetime(2026, 11, 27, 14, 37, 12, 345678, tzinfo=UTC)
    for preset, back in (("1h", timedelta(hours=1)), ("24h", timedelta(hours=24))):
        start = (now - back).replace(minute=0, second=0, microsecond=0)
        assert call_explorer.parse_filters({"range": preset}, now=now).time_from == start
        assert chart_filters.parse_filters({"range": preset}, now.date(), now).start == start
        assert list_filters.parse_filters({"range": preset}, now=now).since == start
    start = datetime(2026, 10, 28, 14, tzinfo=UTC)
    assert chart_filters.range_start("30d", now) == start
    # A moment given in another zone is aligned on the UTC hour (India is UTC+05:30).
    india = now.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert chart_filters.range_start("7d", india) == datetime(2026, 11, 20, 14, tzinfo=UTC)


def _hour_start() -> datetime:
    """Now, away from the end of an hour (a test's requests then share its range's start)."""
    now = datetime.now(UTC)
    if now.minute == 59 and now.second >= 50:
        time.sleep(61 - now.second)
        now = datetime.now(UTC)
    return now


def test_a_presets_partial_first_hour_counts_whole_on_every_page(app, dashboard, project_key):
    """A call in the first hour of "last 24 h", before the moment 24 h ago, is in the range on
    the tools page, its JSON twin, the tool's page and the calls explorer alike: the same
    figure in every place, and the page and the JSON say where the range starts."""
    now = _hour_start()
    start = (now - timedelta(hours=24)).replace(minute=0, second=0, microsecond=0)
    with data(app):
        f.simple_conversation(project_key.project_id, "edge", at=start, n_calls=2)
        f.simple_conversation(project_key.project_id, "before", at=start - timedelta(seconds=2))
    body = dashboard.get("/tools.json?range=24h").get_json()
    assert [(t["function_name"], t["calls"]) for t in body["data"]] == [("lookup", 2)]
    assert body["range"]["preset"] == "24h"
    assert datetime.fromisoformat(body["range"]["from"]) == start
    usage = dashboard.get("/tools/usage.json?name=lookup&range=24h").get_json()
    assert usage["stats"]["calls"] == 2
    assert datetime.fromisoformat(usage["range"]["from"]) == start
    calls = dashboard.get("/calls.json?range=24h").get_json()
    assert len(calls["data"]) == 2
    assert datetime.fromisoformat(calls["filters"]["time_from"]) == start
    doc = page(dashboard.get("/tools?range=24h"))
    assert doc.select("#tools-results tbody tr td.num")[0].text == "2"
    assert doc.one(".time-since").text == f"from {start:%Y-%m-%d %H}:00 UTC"
    assert page(dashboard.get("/calls?range=24h")).one(".time-since").text.startswith("from ")


@pytest.mark.parametrize("url", ["/tools.json?range=24h", "/tools.json?range=1h"])
def test_the_tools_page_of_a_preset_reads_the_roll_ups_only(
    app, dashboard, project_key, count_queries, monkeypatch, url
):
    """Past the exact percentiles' bound the tools page of a preset sums whole hours of the
    roll-ups and reads no call: a range starting inside an hour read that hour's calls from
    the rows (30,000 at 5,000,000 calls: 1.2 s; issue 24)."""
    from webapp.queries import tool_stats

    monkeypatch.setattr(tool_stats, "EXACT_PERCENTILES_MAX_CALLS", 0)
    now = _hour_start()
    with data(app):
        for age in (timedelta(minutes=1), timedelta(minutes=50), timedelta(hours=23, minutes=50)):
            f.simple_conversation(project_key.project_id, f"c{age.seconds}", at=now - age)
    dashboard.get(url)
    with count_queries() as counter:
        body = dashboard.get(url).get_json()
    assert body["data"][0]["calls"] > 0 and body["data"][0]["approximate"] is True
    reads = [s for s in counter.statements if re.search(r"\bFROM tool_invocation\b", s)]
    assert reads == []
