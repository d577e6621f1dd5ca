"""Issue 23's small things on the pages: freshness windows in human units (the JSON twins keep
seconds), the turn index's first words, one comparison button on the replay preview.

HTML is asserted through a parser (``html_dom``); every test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factories as f
import pytest
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401

from webapp.views.formatting import span

FORTY_FIVE_DAYS = 45 * 86400


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (FORTY_FIVE_DAYS, "45 d"),
        (300, "5 min"),
        (30, "30 s"),
        (5400, "1 h 30 min"),
        (90, "1 min 30 s"),
        (86400 + 3600, "1 d 1 h"),
        (0, "0 s"),
        (0.5, "0.5 s"),
        (300.0, "5 min"),
        (None, "\u2013"),
    ],
)
def test_a_span_of_seconds_in_human_units(seconds, shown):
    assert span(seconds) == shown


@pytest.fixture
def support(app, project_key) -> int:
    """The support conversation in a channel with a 45-day window (the project's is 300 s)."""
    with data(app):
        f.channel(project_key.project_id, "support-bot", freshness_seconds=FORTY_FIVE_DAYS)
        return f.support_conversation(project_key.project_id).id


def test_freshness_windows_show_in_human_units(app, dashboard, support):
    conversation = page(dashboard.get(f"/conversations/{support}"))
    assert "freshness 45 d" in conversation.one(".meta-line").text

    replay = page(dashboard.get(f"/conversations/{support}/replay"))
    configured = replay.one("select[name=freshness]").select("option")[0]
    assert configured.text.strip() == "Configured (45 d)"
    assert "freshness 45 d" in " ".join(replay.one(".replay-asof").text.split())

    charts = page(dashboard.get(f"/conversations/{support}/charts", headers=HTMX))
    assert "freshness in use: 45 d" in charts.text

    settings = page(dashboard.get("/settings"))
    cells = [td.text.strip() for td in settings.select("td")]
    assert "45 d" in cells
    assert "overrides the project's (5 min)" in " ".join(settings.text.split())


def test_the_stale_badge_names_the_window_in_human_units(app, dashboard, project_key):
    with data(app):
        old = f.simple_conversation(
            project_key.project_id, "old", at=datetime.now(UTC) - timedelta(hours=2)
        ).id
    doc = page(dashboard.get(f"/conversations/{old}"))
    titles = {b.get("title") for b in doc.select(".call-card .badge-stale")}
    assert titles == {
        "Older than the 5 min freshness window: replay now omits it and the model calls the "
        "tool again."
    }


def test_the_json_twins_keep_the_windows_in_seconds(app, dashboard, support):
    charts = dashboard.get(f"/conversations/{support}/charts.json").get_json()
    assert charts["freshness_seconds"] == FORTY_FIVE_DAYS
    settings = dashboard.get("/settings.json").get_json()
    assert {"name": "support-bot", "freshness_seconds": FORTY_FIVE_DAYS} in settings["channels"]
    assert settings["project"]["freshness_seconds"] == 300


def test_the_turn_index_shows_each_turn_s_first_words(app, dashboard, project_key):
    long_question = "Please compare " + "the quarterly numbers " * 20
    with data(app):
        conv = f.conversation(project_key.project_id, "words", title="Words")
        start = datetime.now(UTC) - timedelta(minutes=5)
        f.message(conv, "w-u1", "user", "<b>Where</b> is my order #1042?", at=start)
        f.message(conv, "w-a1", "assistant", "On its way.", at=start + timedelta(seconds=1))
        f.message(conv, "w-u2", "user", long_question, at=start + timedelta(seconds=2))
        f.message(conv, "w-u3", "user", None, at=start + timedelta(seconds=3))
        cid = conv.id
    doc = page(dashboard.get(f"/conversations/{cid}/turns", headers=HTMX))
    lines = doc.select(".turn-grid li")
    assert [li.one("a.turn-link").text for li in lines] == ["1", "2", "3"]
    # Escaped text (the parser sees no <b> element), cut short, and nothing for a turn without.
    first, second, third = (li.select(".turn-words") for li in lines)
    assert first[0].text == "<b>Where</b> is my order #1042?" and not first[0].select("b")
    assert second[0].text.startswith("Please compare the quarterly numbers")
    assert second[0].text.endswith("…") and len(second[0].text) <= 101
    assert third == []
    twin = dashboard.get(f"/conversations/{cid}/turns.json").get_json()
    assert twin["turns"][0]["opening"] == "<b>Where</b> is my order #1042?"
    assert len(twin["turns"][1]["opening"]) == 120


def test_the_replay_preview_has_one_comparison_button(app, dashboard, support):
    doc = page(dashboard.get(f"/conversations/{support}/replay?persistence=per-service-call"))
    compare = [a for a in doc.select("a") if "/replay/compare" in (a.get("href") or "")]
    assert [a.text.strip() for a in compare] == ["Compare with another policy"]
    # The one that is left starts the comparison from the options chosen.
    assert "a.persistence=per-service-call" in compare[0].get("href")
