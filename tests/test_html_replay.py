"""The replay preview and comparison pages: the options form and its htmx fragment, the payload
as a chat and as JSON, diagnostics linked to the timeline, the anchors the timeline links to,
downloads, comparisons, hostile content, access and a constant number of queries.

HTML is asserted through a parser (``html_dom``); every test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import factories as f
import pytest
from dashboard_support import HTMX, count_get, dashboard_fixture, data, page  # noqa: F401
from html_dom import parse
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation
from webapp.replay.names import tool_name_map
from webapp.views.replay.chat import ENTRY_LIMIT


def replay_url(conversation_id: int, **params) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"/conversations/{conversation_id}/replay" + (f"?{query}" if query else "")


@pytest.fixture
def support(app, project_key) -> int:
    with data(app):
        return f.support_conversation(project_key.project_id).id


def call_rows(app, conversation_id: int) -> dict[str, int]:
    """Row id of every stored call, by function name and round/sequence."""
    from webapp.models import Message

    with app.app_context():
        rows = db.session.execute(
            select(ToolInvocation)
            .join(Message, Message.id == ToolInvocation.message_id)
            .where(Message.conversation_id == conversation_id)
        ).scalars()
        return {f"{c.message_id}.{c.round_index}.{c.sequence_index}": c.id for c in rows}


# --- The page -------------------------------------------------------------------------------------


def test_the_page_has_the_options_form_wired_to_its_own_url(dashboard, support):
    doc = page(dashboard.get(replay_url(support)))
    form = doc.one("form#replay-options")
    assert form.get("hx-get") == f"/conversations/{support}/replay"
    assert form.get("hx-trigger") == "change"
    assert form.get("hx-target") == "#replay-result"
    assert form.get("hx-push-url") == "true"
    assert form.get("action") == f"/conversations/{support}/replay"  # works without JavaScript
    names = {e.get("name") for e in form.iter() if e.tag in ("select", "input")}
    assert names == {
        "format", "as_of", "as_of_custom", "freshness", "freshness_custom", "persistence",
        "trim_trailing", "compact_sources", "result_token_cap", "context_budget", "prune",
    }  # fmt: skip
    as_of = [o.get("value") for o in form.one("select[name=as_of]").select("option")]
    assert as_of == ["now", "turn:1", "turn:2", "turn:3", "custom"]
    labels = [o.text for o in form.one("select[name=as_of]").select("option")]
    assert labels[1].startswith("Start of turn 1 · ") and "I want a refund" in labels[1]
    freshness = form.one("select[name=freshness]").select("option")
    assert freshness[0].text.strip() == "Configured (5 min)"


def test_the_chat_pairs_calls_with_results_and_anchors_every_call(app, dashboard, support):
    doc = page(dashboard.get(replay_url(support)))
    rows = call_rows(app, support)
    pairs = doc.select("li.bubble-round .pair")
    replayed = {p.get("id") for p in pairs}
    assert len(pairs) == 4
    for pair in pairs:
        assert pair.select(".pair-call .fn") and pair.select(".pair-result")
    anchors = {a.get("id") for a in doc.select("span.anchor")}
    # Every stored call has exactly one anchor: on its chat entry, or on the diagnostic that
    # explains why it is left out (here the failed and the unfinished run).
    assert replayed | anchors == {f"call-{r}" for r in rows.values()}
    assert not replayed & anchors
    roles = [li.one(".bubble-head .role").text for li in doc.select("ol.chat li.bubble")]
    assert roles == ["system", "user", "assistant", "assistant", "assistant", "user", "user"]


def test_calls_the_rules_touched_carry_badges(dashboard, support):
    doc = page(dashboard.get(replay_url(support)))
    badges = {
        pair.one(".fn").text: [b.text for b in pair.select(".pair-head .badge")]
        for pair in doc.select(".pair")
    }
    assert badges["search_kb"] == ["compacted"]
    assert badges["get_customer"] == ["redacted"]
    assert badges["get_order"] == []


def test_diagnostics_link_to_their_item_on_the_conversation_page(dashboard, support):
    doc = page(dashboard.get(replay_url(support)))
    rows = doc.select("ol.diag-list li.diag")
    kinds = [r.one(".diag-head .badge").text for r in rows]
    assert kinds == ["compacted", "redacted", "run not completed", "run not completed"]
    targets = [r.select(".diag-head a")[0].get("href") for r in rows]
    assert all(t.startswith(f"/conversations/{support}#") for t in targets)
    timeline = page(dashboard.get(f"/conversations/{support}"))
    ids = {e.get("id") for e in timeline.iter() if e.get("id")}
    for target in targets:
        assert target.split("#", 1)[1] in ids, target  # call-<id> and msg-<id> exist there


def test_checks_and_stats_are_shown(dashboard, support):
    doc = page(dashboard.get(replay_url(support, freshness="off")))
    stats = {
        s.one(".stat-label").text.strip(): s.one(".stat-value").text.split()[0]
        for s in doc.select(".replay-stats .stat")
    }
    assert stats["messages sent"] == "11"
    assert stats["calls replayed"] == "4"
    assert stats["calls left out"] == "3"
    assert doc.select(".check-naive")  # replaying the raw rows would leave calls unanswered
    assert "unanswered_call" in doc.one(".check-naive").text


def test_the_payload_as_raw_json_is_highlighted_escaped_and_copyable(dashboard, support):
    doc = page(dashboard.get(replay_url(support, format="anthropic")))
    raw = doc.one("pre#replay-raw-json")
    assert json.loads(raw.text)["system"].startswith("You are a helpful support agent")
    assert raw.select("span.j-key")
    copy = doc.select("[data-copy-url]")[0].get("data-copy-url")
    copied = dashboard.get(copy)
    assert copied.status_code == 200 and copied.mimetype == "application/json"
    assert json.loads(copied.data) == json.loads(raw.text)


# --- htmx, JSON twin, downloads -------------------------------------------------------------------


def test_the_fragment_updates_the_result_and_pushes_the_page_url(dashboard, support):
    url = f"/conversations/{support}/replay/fragment?as_of=turn:2&freshness=off&format=anthropic"
    response = dashboard.get(url, headers=HTMX)
    assert response.status_code == 200
    assert response.headers["HX-Push-Url"] == replay_url(
        support, format="anthropic", as_of="turn:2", freshness="off"
    )
    doc = parse(response.data)
    assert not doc.select("html") and not doc.select("form")  # just the result
    messages = json.loads(doc.one("pre#replay-raw-json").text)["messages"]
    assert messages[-1]["content"] == "Also check my other order #1043 please."


def test_the_custom_fields_of_the_form_become_the_options(dashboard, support):
    at = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
    url = (
        f"/conversations/{support}/replay/fragment?as_of=custom&as_of_custom={at}"
        "&freshness=custom&freshness_custom=1"
    )
    response = dashboard.get(url, headers=HTMX)
    assert response.status_code == 200
    assert f"as_of={at}" in response.headers["HX-Push-Url"]
    doc = parse(response.data)
    kinds = {b.text for b in doc.select(".diag-counts .badge")}
    assert any(k.startswith("stale") for k in kinds)  # an hour later, with a 1 s window
    # The pushed URL shows the same choices when the page is loaded from it.
    reloaded = page(dashboard.get(response.headers["HX-Push-Url"]))
    selected = [o.get("value") for o in reloaded.select("select[name=as_of] option[selected]")]
    assert selected == ["custom"]
    assert reloaded.one("input[name=as_of_custom]").get("value") == at


def test_an_unusable_option_answers_422_naming_it_everywhere(dashboard, support):
    fragment = dashboard.get(f"/conversations/{support}/replay/fragment?as_of=turn:7", headers=HTMX)
    assert fragment.status_code == 422
    assert fragment.headers["HX-Push-Url"] == "false"
    assert "there is no turn 7" in parse(fragment.data).one(".replay-error").text
    full = dashboard.get(replay_url(support, result_token_cap="-3"))
    assert full.status_code == 422
    doc = parse(full.data)
    assert doc.select("form#replay-options")  # still there, to correct the value
    assert doc.one("input[name=result_token_cap]").get("value") == "-3"
    assert "result_token_cap" in doc.one(".replay-error").text
    twin = dashboard.get(f"/conversations/{support}/replay.json?prune=lifo")
    assert twin.status_code == 422
    assert twin.get_json()["error"]["param"] == "prune"


def test_the_json_twin_is_the_export_document_of_the_api(dashboard, client, project_key, support):
    twin = dashboard.get(f"/conversations/{support}/replay.json?freshness=off").get_json()
    api = client.get(
        "/api/v1/conversations/conv-support-1/replay?freshness=off", headers=project_key.headers
    ).get_json()
    assert twin["schema_version"] == 1
    for key in ("payload", "diagnostics", "validation", "naive_replay_problems", "options"):
        assert twin[key] == api[key], key


def test_the_download_button_downloads_the_export_document(dashboard, support):
    doc = page(dashboard.get(replay_url(support, format="openai-responses")))
    link = doc.select(".replay-bar a[download]")[0]
    assert link.get("hx-boost") == "false"
    response = dashboard.get(link.get("href"))
    assert response.status_code == 200
    assert response.headers["Content-Disposition"] == (
        'attachment; filename="replay-conv-support-1-openai-responses.json"'
    )
    assert json.loads(response.data)["format"] == "openai-responses"


# --- Long conversations ---------------------------------------------------------------------------


def test_a_long_replay_shows_its_latest_entries_and_everything_on_demand(app, dashboard):
    with data(app):
        conv_id = f.big_conversation(1, "long", turns=120, rounds=2, parallel=1).id
    doc = page(dashboard.get(replay_url(conv_id, freshness="off")))
    gap = doc.one(".chat-gap")
    assert "earlier entr" in gap.text
    shown = doc.select("ol.chat li.bubble")
    assert len(shown) == ENTRY_LIMIT
    everything = page(dashboard.get(gap.one("a").get("href")))
    assert len(everything.select("ol.chat li.bubble")) == 120 * 4
    assert not everything.select(".chat-gap")


def test_a_link_to_an_early_call_shows_the_entries_around_it(app, dashboard):
    with data(app):
        conv_id = f.big_conversation(1, "long", turns=120, rounds=2, parallel=1).id
        first = db.session.scalars(
            select(ToolInvocation.id).order_by(ToolInvocation.id).limit(1)
        ).one()
    detail = page(dashboard.get(f"/calls/{first}", headers=HTMX))
    href = next(a.get("href") for a in detail.select("a") if "/replay" in (a.get("href") or ""))
    assert href == f"/conversations/{conv_id}/replay?call={first}#call-{first}"
    doc = page(dashboard.get(href.split("#")[0] + "&freshness=off"))
    assert doc.select(f"#call-{first}")
    assert "later entr" in doc.select(".chat-gap")[-1].text  # the window moved to the call


def test_the_timeline_links_each_call_to_its_anchor_in_the_replay(app, dashboard, support):
    rows = call_rows(app, support)
    for row in rows.values():
        detail = page(dashboard.get(f"/calls/{row}", headers=HTMX))
        link = [a for a in detail.select("a") if "replay" in (a.get("href") or "")]
        assert link, "the call panel links to the replay preview"
        href = link[0].get("href")
        assert href.startswith(f"/conversations/{support}/replay")
        anchor = href.split("#", 1)[1]
        assert anchor == f"call-{row}"
        path = href.split("#", 1)[0]
        assert page(dashboard.get(path)).select(f"#{anchor}"), href


# --- Comparison -----------------------------------------------------------------------------------


@pytest.fixture
def failed_run(app, project_key) -> int:
    """A run that failed in its third round: rounds 0 and 1 were sent to later service calls."""
    now = datetime.now(UTC) - timedelta(seconds=30)
    with data(app):
        conv = f.conversation(project_key.project_id, "failed-run", title="Failed run", at=now)
        f.message(conv, "fr-u1", "user", "Research this", at=now)
        a = f.message(conv, "fr-a1", "assistant", None, at=now, status="failed")
        for r in range(3):
            f.calls(a, r, [f.Call("search", {"round": r}, f"result {r}")], at=now)
            f.usage(a, r)
        return conv.id


def test_compare_per_run_with_per_service_call_marks_what_only_one_sends(
    app, dashboard, failed_run
):
    doc = page(dashboard.get(f"/conversations/{failed_run}/replay/compare"))
    forms = doc.select("form#compare-options fieldset")
    assert len(forms) == 2
    b_mode = forms[1].select("select[name=b.persistence] option[selected]")
    assert [o.get("value") for o in b_mode] == ["per-service-call"]
    heads = [h.text for h in doc.select(".compare-summary h2")]
    assert heads == ["Only in B"]
    # Rounds 0 and 1 were sent to later service calls; round 2 never was, so trimming leaves
    # it out on both sides.
    only_b = doc.select("table.compare-calls tbody tr")
    assert len(only_b) == 2
    assert all("run not completed" in row.text for row in only_b)
    a_side, b_side = doc.select(".compare-column")
    assert not a_side.select(".mark-only")
    assert len(b_side.select("li.mark-only")) == 2
    assert [b.text for b in b_side.select(".badge-only")] == ["only in B"] * 2
    assert "trailing trimmed" in b_side.one(".compare-diagnostics").text
    differing = [r.select("td")[0].text for r in doc.select(".compare-stats tr.differs")]
    assert "Calls replayed" in differing and "Messages" in differing


def test_compare_as_json_and_through_htmx(dashboard, failed_run):
    base = f"/conversations/{failed_run}/replay/compare"
    twin = dashboard.get(base + ".json?b.persistence=per-service-call").get_json()
    assert twin["a"]["options"]["persistence"] == "per-run"
    assert twin["b"]["options"]["persistence"] == "per-service-call"
    only_b = [
        (d["call"]["function_name"], d["call"]["round_index"]) for d in twin["diff"]["only_in_b"]
    ]
    assert only_b == [("search", 0), ("search", 1)]
    response = dashboard.get(base + "?a.freshness=off&b.freshness=1", headers=HTMX)
    assert response.status_code == 200
    pushed = response.headers["HX-Push-Url"]
    assert "a.freshness=off" in pushed and "b.freshness=1" in pushed
    bad = dashboard.get(base + "?b.context_budget=-1", headers=HTMX)
    assert (
        bad.status_code == 422 and "b.context_budget" in parse(bad.data).one(".replay-error").text
    )


def test_two_budgets_side_by_side(dashboard, support):
    doc = page(
        dashboard.get(
            f"/conversations/{support}/replay/compare?b.context_budget=60&a.freshness=off&b.freshness=off"
        )
    )
    assert doc.select(".compare-column")[0].select("li.mark-only")  # pruned from B
    assert any("pruned" in r.text for r in doc.select("table.compare-calls tbody tr"))


# --- Hostile content ------------------------------------------------------------------------------

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ATTR = '"><img src=x onerror=alert(2)>'


@pytest.fixture
def hostile(app, project_key) -> int:
    now = datetime.now(UTC)
    with data(app):
        conv = f.conversation(
            project_key.project_id,
            f"conv-{ATTR}",
            title=f"Title {XSS}",
            channel_name=f"chan {XSS}",
            system_prompt=f"System {XSS}",
        )
        f.message(conv, f"u-{ATTR}", "user", f"User {XSS}", at=now)
        a = f.message(conv, f"a-{ATTR}", "assistant", f"Answer {XSS} [source1]", at=now)
        f.calls(
            a,
            0,
            [
                f.Call(f"fn{XSS}", {XSS: ATTR}, f"Result {XSS}", external_id=f"id{ATTR}"),
                f.Call(
                    ATTR, None, json.dumps([{"source_number": 1, "t": XSS}, {"source_number": 2}])
                ),
                f.Call("late", {"q": XSS}, None, external_id=XSS),
            ],
            at=now,
        )
        return conv.id


def assert_inert(html: bytes) -> None:
    doc = parse(html)
    for script in doc.select("script"):
        assert (script.get("src") or "").startswith("/static/"), script.attrs
    for element in doc.iter():
        assert not (element.tag == "img" and element.get("src") == "x"), element.attrs
        assert not [name for name in element.attrs if name.startswith("on")], element.attrs
    assert b"<script>alert" not in html


@pytest.mark.parametrize(
    "path",
    [
        "/replay",
        "/replay?format=anthropic&persistence=per-service-call",
        "/replay?show=all&format=openai-responses",
        "/replay/compare",
        "/replay/compare?b.format=anthropic",
    ],
)
def test_agent_content_is_escaped_everywhere(dashboard, hostile, path):
    response = dashboard.get(f"/conversations/{hostile}{path}")
    assert response.status_code == 200
    assert_inert(response.data)
    assert "User <script>" in parse(response.data).text or "compare" in path
    fragment = dashboard.get(
        f"/conversations/{hostile}/replay/fragment?freshness=off", headers=HTMX
    )
    assert_inert(fragment.data)


def test_hostile_ids_are_text_in_the_raw_json_too(dashboard, hostile):
    doc = page(dashboard.get(f"/conversations/{hostile}/replay?freshness=off"))
    payload = json.loads(doc.one("pre#replay-raw-json").text)
    assert payload["messages"][0]["content"] == f"System {XSS}"
    # Providers refuse such tool names: the replay sends names they accept, and its diagnostics
    # name the stored ones, as text.
    sent = tool_name_map([f"fn{XSS}", ATTR, "late"])
    names = [c.text for c in doc.select(".pair .fn")]
    assert names == [sent[f"fn{XSS}"], sent[ATTR]]
    badges = [b.text.strip() for b in doc.select(".pair .badge")]
    assert badges.count("name renamed") == 2
    assert f"fn{XSS}" in doc.text and ATTR in doc.text


# --- Access and queries ---------------------------------------------------------------------------


def test_the_pages_need_a_login(client, support):
    response = client.get(replay_url(support))
    assert response.status_code == 302 and "/login" in response.headers["Location"]
    twin = client.get(f"/conversations/{support}/replay.json")
    assert twin.status_code == 401 and twin.get_json()["error"]["code"] == "unauthorized"


def test_another_projects_conversation_is_not_found(app, dashboard, other_project_key):
    with data(app):
        other = f.simple_conversation(other_project_key.project_id, "theirs").id
    for path in (
        "/replay",
        "/replay.json",
        "/replay/fragment",
        "/replay/compare",
        "/replay/download",
    ):
        assert dashboard.get(f"/conversations/{other}{path}").status_code == 404, path


@pytest.mark.parametrize(
    "path",
    ["/replay", "/replay/fragment", "/replay.json", "/replay/compare", "/replay/download"],
)
def test_queries_do_not_grow_with_the_conversation(app, dashboard, count_queries, path):
    with data(app):
        small = f.big_conversation(1, "small", turns=1, rounds=2, parallel=5).id
        large = f.big_conversation(1, "large", turns=10, rounds=10, parallel=5).id
    headers = HTMX if "fragment" in path else {}
    counts = [
        count_get(
            dashboard, count_queries, f"/conversations/{cid}{path}?freshness=off", headers=headers
        )[0]
        for cid in (small, large)
    ]
    # 8, and the project's model connections for "Send to model" / "Send both" (views.runs).
    assert counts[0] == counts[1] <= 9, counts


def test_the_json_view_is_remembered_through_the_form(dashboard, support):
    doc = page(dashboard.get(replay_url(support, view="json")))
    radios = {r.get("value"): r for r in doc.select(".view-tabs input[type=radio]")}
    assert "checked" in radios["json"].attrs and "checked" not in radios["chat"].attrs
    assert radios["json"].get("form") == "replay-options"  # sent with the next update
    response = dashboard.get(
        f"/conversations/{support}/replay/fragment?view=json&format=anthropic", headers=HTMX
    )
    assert response.headers["HX-Push-Url"].endswith("format=anthropic&view=json")
