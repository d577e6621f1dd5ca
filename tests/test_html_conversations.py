"""The conversations list and the conversation page, asserted on the parsed HTML and the JSON
twins, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factories as f
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401

from webapp.views.conversations import timeline_model as model


def conversation_rows(doc):
    return [row.get("id") for row in doc.select("#conv-rows tr[data-row-id]")]


def test_list_shows_columns_and_newest_activity_first(app, dashboard, project_key):
    with data(app):
        old = f.simple_conversation(
            project_key.project_id, "old", at=datetime.now(UTC) - timedelta(days=2)
        )
        support = f.support_conversation(project_key.project_id)
        old_id, support_id = old.id, support.id
    doc = page(dashboard.get("/conversations"))
    assert conversation_rows(doc) == [f"conv-{support_id}", f"conv-{old_id}"]
    cells = [c.text.strip() for c in doc.one(f"#conv-{support_id}").select("td")]
    assert cells[0].startswith("Refund for order #1042")
    assert cells[1:7] == ["support-bot", "3", "7", "1", "10,013", "$0.0269"]
    assert "1 failed run" in cells[0] and "2 without response" in cells[0]
    # The live poller is there for the default sort.
    assert doc.select(".live-strip[hx-get][hx-trigger]")


def test_list_search_matches_title_id_text_and_tool_name(app, dashboard, project_key):
    with data(app):
        f.support_conversation(project_key.project_id, "conv-a", title="Refund please")
        f.simple_conversation(project_key.project_id, "conv-b")
    for q, expected in [
        ("refund PLEASE", 1),  # title, any case
        ("conv-b", 1),  # conversation id
        ("other order #1043", 1),  # message text
        ("create_ticket", 1),  # tool name
        ("lookup", 1),
        ("100%_", 0),  # LIKE wildcards are literal
        ("nothing-like-this", 0),
    ]:
        doc = page(dashboard.get("/conversations", query_string={"q": q}))
        assert len(conversation_rows(doc)) == expected, q


def test_list_filters(app, dashboard, project_key):
    now = datetime.now(UTC)
    with data(app):
        f.support_conversation(project_key.project_id, "bad", channel_name="support-bot")
        f.simple_conversation(project_key.project_id, "fine", at=now - timedelta(days=10))

    def count(**args):
        return len(conversation_rows(page(dashboard.get("/conversations", query_string=args))))

    assert count() == 2
    assert count(has_errors="1") == 1
    assert count(missing_responses="1") == 1
    assert count(failed_runs="1") == 1
    assert count(channel="support-bot") == 1
    assert count(channel="unknown") == 0
    today = now.date().isoformat()
    assert count(**{"from": today}) == 1
    assert count(**{"to": (now - timedelta(days=5)).date().isoformat()}) == 1


def test_active_search_returns_the_results_fragment_and_a_clean_url(app, dashboard, project_key):
    with data(app):
        f.simple_conversation(project_key.project_id, "conv-b")
    response = dashboard.get("/conversations?q=conv-b&channel=&has_errors=", headers=HTMX)
    doc = page(response)
    assert not doc.select("html") and not doc.select("form#filters")
    assert len(conversation_rows(doc)) == 1
    assert response.headers["HX-Push-Url"] == "/conversations?q=conv-b"
    # A boosted navigation gets the whole page.
    boosted = page(dashboard.get("/conversations", headers={**HTMX, "HX-Boosted": "true"}))
    assert boosted.select("form#filters")


def test_list_pages_with_a_keyset_cursor(app, dashboard, project_key):
    now = datetime.now(UTC)
    with data(app):
        for i in range(7):
            f.simple_conversation(project_key.project_id, f"c{i}", at=now - timedelta(minutes=i))
    first = dashboard.get("/conversations.json?limit=3").get_json()
    assert [c["external_id"] for c in first["data"]] == ["c0", "c1", "c2"]
    assert first["has_more"] and first["next_cursor"]
    second = dashboard.get(f"/conversations.json?limit=3&cursor={first['next_cursor']}").get_json()
    assert [c["external_id"] for c in second["data"]] == ["c3", "c4", "c5"]
    # The HTML loader row fetches the next rows as a fragment that replaces it.
    doc = page(dashboard.get("/conversations?limit=3"))
    loader = doc.one("#conv-rows .loader[hx-trigger=revealed]")
    rows = page(dashboard.get(loader.get("hx-get"), headers=HTMX))
    assert next(r.get("id") for r in rows.select("tr[data-row-id]")).startswith("conv-")
    assert len(rows.select("tr[data-row-id]")) == 3 and rows.select(".loader")


def test_list_sorted_by_calls_pages_by_calls(app, dashboard, project_key):
    with data(app):
        for i in range(5):
            f.simple_conversation(project_key.project_id, f"n{i}", n_calls=i + 1)
    first = dashboard.get("/conversations.json?sort=calls&limit=2").get_json()
    assert [c["stats"]["calls"] for c in first["data"]] == [5, 4]
    rest = dashboard.get(
        f"/conversations.json?sort=calls&limit=10&cursor={first['next_cursor']}"
    ).get_json()
    assert [c["stats"]["calls"] for c in rest["data"]] == [3, 2, 1]
    # A cursor of another sort is refused, naming the parameter.
    recent = dashboard.get("/conversations.json?limit=1").get_json()
    wrong = dashboard.get(f"/conversations.json?sort=calls&cursor={recent['next_cursor']}")
    assert wrong.status_code == 422 and wrong.get_json()["error"]["param"] == "cursor"


def test_bad_list_parameters_are_422_not_500(app, dashboard, project_key):
    for query in ("sort=bogus", "cursor=%%%", "limit=0", "limit=201", "limit=x", "from=nope"):
        json_response = dashboard.get(f"/conversations.json?{query}")
        assert json_response.status_code == 422, query
        assert json_response.get_json()["error"]["code"] == "invalid"
        html_response = dashboard.get(f"/conversations?{query}")
        assert html_response.status_code == 422 and b"<html" in html_response.data


def test_conversation_page_shows_turns_rounds_parallel_calls_and_final_text(
    app, dashboard, project_key
):
    with data(app):
        conv = f.support_conversation(project_key.project_id)
        cid = conv.id
    doc = page(dashboard.get(f"/conversations/{cid}"))
    assert doc.one("h1").text == "Refund for order #1042"
    messages = doc.select("#timeline article.msg")
    assert [m.classes[1] for m in messages] == [
        "msg-user",
        "msg-assistant",
        "msg-user",
        "msg-assistant",
        "msg-user",
        "msg-assistant",
    ]
    assert [t.text for t in doc.select("#timeline .turn-label")] == ["Turn 1", "Turn 2", "Turn 3"]
    first_run = messages[1]
    rounds = first_run.select(".round")
    assert len(rounds) == 2
    # Round 0: three parallel calls side by side, in sequence order.
    assert "parallel" in rounds[0].one(".calls").classes
    assert [n.text for n in rounds[0].select(".call-card .fn")] == [
        "search_kb",
        "get_order",
        "get_customer",
    ]
    assert [n.text for n in rounds[1].select(".call-card .fn")] == ["create_ticket"]
    badges_of = {
        card.one(".fn").text: [b.text for b in card.select(".badge")]
        for card in first_run.select(".call-card")
    }
    assert badges_of["search_kb"] == ["would be compacted"]
    assert badges_of["get_customer"] == ["redacted"]
    assert badges_of["get_order"] == ["ok"]
    assert [d.text for d in rounds[0].select(".dur")] == ["420 ms", "180 ms", "95 ms"]
    assert "[source1]" in first_run.one(".final").text
    # A waterfall of the run, as a Plotly figure in a data attribute.
    assert first_run.one(".chart[data-figure]")
    # The failed run is marked, with its error and its call without response.
    failed = messages[3]
    assert "run-failed" in failed.classes and failed.one(".run-alert")
    assert [b.text for b in failed.select(".call-card .badge")] == ["error", "no response"]
    assert "in progress" in messages[5].one(".msg-head").text
    # Every call opens its detail in the side panel (htmx) or as a page (no JS).
    card = first_run.select(".call-card")[0]
    assert card.get("href") == card.get("hx-get")
    timeline = doc.one("#timeline")  # cards inherit where the detail goes
    assert timeline.get("hx-target") == "#detail" and timeline.get("hx-swap") == "innerHTML"
    assert doc.one("#conv-summary").text.split()[:2] == ["3", "turns"]


def test_stale_badge_follows_channel_then_project_window(app, dashboard, project_key):
    long_ago = datetime.now(UTC) - timedelta(hours=2)
    with data(app):
        f.channel(project_key.project_id, "fresh-forever", freshness_seconds=10**6)
        old = f.simple_conversation(project_key.project_id, "old", at=long_ago)
        kept = f.simple_conversation(project_key.project_id, "kept", at=long_ago)
        kept.channel_id = f.channel(project_key.project_id, "fresh-forever").id
        old_id, kept_id = old.id, kept.id

    def badge_texts(cid):
        return {
            b.text for b in page(dashboard.get(f"/conversations/{cid}")).select(".call-card .badge")
        }

    assert badge_texts(old_id) == {"stale now"}  # project window: 300 s
    assert badge_texts(kept_id) == {"ok"}  # the channel's window overrides it


def test_timeline_pages_load_lazily_and_long_runs_in_chunks(app, dashboard, project_key):
    with data(app):
        conv = f.big_conversation(project_key.project_id, turns=12, rounds=10, parallel=5)
        cid = conv.id
    doc = page(dashboard.get(f"/conversations/{cid}"))
    # 50 calls per run: the first page holds two runs (budget 60), each showing 30 calls.
    runs = doc.select("#timeline article.msg-assistant")
    assert len(runs) == 2
    assert len(runs[0].select(".call-card")) == model.CALLS_PER_CHUNK
    chunk_loader = runs[0].one(".run .loader")
    assert "after=5.4" in chunk_loader.get("hx-get")
    page_loader = next(
        n
        for n in doc.select("#timeline .loader[hx-trigger=revealed]")
        if "cursor=" in n.get("hx-get")
    )
    assert not doc.select("#live")  # no live poller until the last page is shown

    chunk = page(dashboard.get(chunk_loader.get("hx-get"), headers=HTMX))
    assert len(chunk.select(".call-card")) == 20 and not chunk.select(".loader")
    assert next(r.text.split()[:2] for r in chunk.select(".round-label")) == ["Round", "6"]

    seen = len(runs)
    url = page_loader.get("hx-get")
    while url:
        fragment = page(dashboard.get(url, headers=HTMX))
        seen += len(fragment.select("article.msg-assistant"))
        loaders = fragment.select(".loader[hx-trigger=revealed]")
        url = next((n.get("hx-get") for n in loaders if "cursor=" in (n.get("hx-get") or "")), None)
        if url is None:
            assert fragment.one("#live[hx-get][hx-trigger]")
    assert seen == 12
    turns = [int(t.text.split()[1]) for t in fragment.select(".turn-label")]
    assert turns[-1] == 12


def test_a_continued_round_is_labelled(app, dashboard, project_key):
    with data(app):
        conv = f.big_conversation(project_key.project_id, turns=1, rounds=1, parallel=45)
        cid, mid = conv.id, f.assistant_ids(conv)[0]
    chunk = page(
        dashboard.get(f"/conversations/{cid}/messages/{mid}/calls?after=0.29", headers=HTMX)
    )
    assert "(continued)" in chunk.one(".round-label").text
    assert chunk.select(".call-card .seq")[0].text == "#30"
    assert dashboard.get(f"/conversations/{cid}/messages/{mid}/calls?after=x").status_code == 422
    whole = dashboard.get(f"/conversations/{cid}/messages/{mid}/calls.json?after=0.40").get_json()
    assert [c["call"]["sequence_index"] for r in whole["run"]["rounds"] for c in r["calls"]] == [
        41,
        42,
        43,
        44,
    ]


def test_long_texts_are_folded_with_show_all(app, dashboard, project_key):
    long_text = "word " * 1000
    with data(app):
        conv = f.conversation(project_key.project_id, "long")
        msg = f.message(conv, "long-u", "user", long_text, at=datetime.now(UTC))
        cid, mid = conv.id, msg.id
    doc = page(dashboard.get(f"/conversations/{cid}"))
    content = doc.one(f"#content-{mid}")
    assert len(content.one(".prose-box").text) <= model.MESSAGE_FOLD_CHARS
    more = content.one("a.show-all")
    full = page(dashboard.get(more.get("hx-get"), headers=HTMX))
    assert full.one(f"#content-{mid} .prose-box").text == long_text
    assert not full.select(".show-all")


def test_conversation_json_twin_matches_the_page(app, dashboard, project_key):
    with data(app):
        cid = f.support_conversation(project_key.project_id).id
    body = dashboard.get(f"/conversations/{cid}.json").get_json()
    assert body["conversation"]["external_id"] == "conv-support-1"
    assert body["stats"]["calls"] == 7 and body["tools_offered"] == [
        "create_ticket",
        "get_order",
        "search_kb",
    ]
    run = body["messages"][1]["run"]
    assert [c["call"]["function_name"] for c in run["rounds"][0]["calls"]] == [
        "search_kb",
        "get_order",
        "get_customer",
    ]
    assert run["rounds"][0]["calls"][0]["badges"][0]["kind"] == "compacted"
    assert "list_response" not in run["rounds"][0]["calls"][0]["call"]
    assert body["next_cursor"] is None
    by_accept = dashboard.get(f"/conversations/{cid}", headers={"Accept": "application/json"})
    assert by_accept.get_json() == body


def test_another_projects_conversation_is_404(app, dashboard, project_key, other_project_key):
    with data(app):
        theirs = f.support_conversation(other_project_key.project_id, "theirs").id
    assert dashboard.get(f"/conversations/{theirs}").status_code == 404
    assert dashboard.get(f"/conversations/{theirs}.json").get_json()["error"]["code"] == "not_found"
    assert dashboard.get("/conversations/999999").status_code == 404
    listed = page(dashboard.get("/conversations"))
    assert not listed.select("tr[data-row-id]")
