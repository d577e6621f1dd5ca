"""Starting a study from the dashboard (issue 25, item 5): "Study these conversations" on the
calls explorer and the conversation list carries their filters into the form; the form's
estimate (conversations, runs, tokens, cost) comes before anything starts, nothing is stored
by it; a study starts only from the estimate the user saw, is refused over its spending cap,
and its conversations are those holding the explorer's matching calls. The studies list and
its JSON twin. SQLite and PostgreSQL (the `app` fixture)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from dashboard_support import HTMX, count_get, csrf_token, dashboard_fixture, page  # noqa: F401
from runs_support import RUN_CONFIG, work
from studies_support import CIDS, FRESH, seed, start
from test_api_studies_calls import OTHER, docs_conversation

from webapp.db import db
from webapp.models import ModelRun, Study
from webapp.views.studies import fingerprint, form_values


@pytest.fixture
def app_config():
    return dict(RUN_CONFIG)


@pytest.fixture
def seeded(app, project_key, fake):
    seed(app, project_key.project_id, fake)
    docs_conversation(app, project_key.project_id)
    return project_key


def form(token: str, **fields: str) -> dict[str, str]:
    """The start form as a browser sends it: the explorer's lookup_order calls, at turn 2,
    A the default replay against B with freshness off (the fake answers differently)."""
    body = {
        "csrf_token": token,
        "selection": "calls",
        "calls.tool": "lookup_order",
        "connection": "oa",
        "as_of": "turn:2",
        "a.preset": "default",
        "b.preset": "freshness_off",
        "concurrency": "2",
    }
    body.update(fields)
    return body


def finish(app) -> int:
    """The run worker prepares the study's runs and sends them, until nothing is left; how
    many runs it sent."""
    sent = total = work(app)
    while sent:
        sent = work(app)
        total += sent
    return total


def studies_stored(app) -> int:
    with app.app_context():
        count = db.session.query(Study).count()
        db.session.remove()
    return count


def test_study_these_conversations_from_the_calls_explorer(app, dashboard, seeded):
    results = page(dashboard.get("/calls?tool=search_docs&status=error&sort=size", headers=HTMX))
    link = results.one("a.study-these").get("href")
    url = urlsplit(link)
    assert url.path == "/studies" and url.fragment == "start"
    assert parse_qs(url.query) == {
        "select": ["calls"],
        "tool": ["search_docs"],
        "status": ["error"],
    }

    doc = page(dashboard.get(link))
    assert doc.one("details#start").attrs.keys() >= {"open"}  # the form is open
    assert doc.one('input[name="selection"][value="calls"]').attrs.keys() >= {"checked"}
    tool = doc.one('select[name="calls.tool"]')
    assert [o.get("value") for o in tool.select("option[selected]")] == ["search_docs"]
    status = doc.one('select[name="calls.status"]')
    assert [o.get("value") for o in status.select("option[selected]")] == ["error"]
    assert doc.one('a[aria-current="page"]').text == "Studies"  # the nav's new section

    # No call matches: no link (the study would match no conversation).
    empty = page(dashboard.get("/calls?tool=no_such_tool", headers=HTMX))
    assert not empty.select("a.study-these")


def test_study_these_conversations_from_the_list(app, dashboard, seeded):
    results = page(dashboard.get("/conversations?channel=web&sort=oldest", headers=HTMX))
    link = results.one("a.study-these").get("href")
    assert parse_qs(urlsplit(link).query) == {"select": ["list"], "channel": ["web"]}
    doc = page(dashboard.get(link))
    assert doc.one('input[name="selection"][value="list"]').attrs.keys() >= {"checked"}
    channel = doc.one('select[name="list.channel"]')
    assert [o.get("value") for o in channel.select("option[selected]")] == ["web"]


def test_the_estimate_comes_first_and_stores_nothing(app, dashboard, seeded):
    token = csrf_token(dashboard)
    response = dashboard.post("/studies/preview", data=form(token), headers=HTMX)
    part = page(response)
    stats = [s.text for s in part.select(".study-stats .stat")]
    # The four orders conversations hold lookup_order calls; docs-1 does not.
    assert stats[0].startswith("4") and "conversations" in stats[0]
    assert stats[1].startswith("8") and "runs" in stats[1]
    assert "$" in stats[4]
    rows = part.select(".study-estimate-table tbody tr")
    assert "freshness off" in rows[1].text
    button = part.one('button[name="confirm"]')
    assert button.get("hx-post") == "/studies" and "8 runs" in button.text
    assert part.one(".study-cap-none")  # no cap: said so
    assert studies_stored(app) == 0

    # Started from that estimate: the study's page, its conversations the explorer's.
    body = form(token, confirm=button.get("value"))
    started = dashboard.post("/studies", data=body, headers=HTMX)
    assert started.status_code == 204
    target = started.headers["HX-Redirect"]
    assert target.startswith("/studies/study_")
    twin = dashboard.get(target + ".json").get_json()
    assert twin["calls"] == {"tool": "lookup_order"}
    assert twin["conversations"] == 4 and twin["concurrency"] == 2
    assert twin["variants"]["b"]["options"]["freshness"] == "off"
    assert twin["variants"]["a"]["options"] == {"as_of": "turn:2", "format": "openai-chat"}

    assert finish(app) == 8
    report = dashboard.get(target + ".json").get_json()["report"]
    assert report["compared"] == 4 and report["differ"] == 4

    listing = page(dashboard.get("/studies"))
    first = listing.select(".study-list tbody tr")[0]
    assert target.rsplit("/", 1)[1] in first.text and "0 of 4" in first.text
    assert "by calls" in first.text
    data = dashboard.get("/studies.json").get_json()["data"]
    assert [d["id"] for d in data] == [target.rsplit("/", 1)[1]]
    assert data[0]["selection"] == "calls" and data[0]["status"] == "succeeded"


def test_over_the_cap_is_refused_clearly(app, dashboard, seeded):
    token = csrf_token(dashboard)
    body = form(token, max_cost_usd="0.000001")
    part = page(dashboard.post("/studies/preview", data=body, headers=HTMX))
    refusal = part.one(".study-refusal")
    assert refusal.get("role") == "alert"
    assert "over your spending cap" in refusal.text and "nothing was started" in refusal.text
    assert not part.select('button[name="confirm"]')  # no way to start it
    assert part.one(".study-stats .stat-error")  # the cost, marked

    # A forged confirmation starts nothing either; without htmx the page answers 422.
    forged = dict(body, confirm=fingerprint(form_values(body)))
    response = dashboard.post("/studies", data=forged)
    assert response.status_code == 422
    assert "over your spending cap" in page_text(response)
    assert studies_stored(app) == 0

    # A cap above the estimate: within it, and said so.
    part = page(
        dashboard.post("/studies/preview", data=form(token, max_cost_usd="50"), headers=HTMX)
    )
    assert "Within your spending cap of $50" in part.one(".study-cap-ok").text


def page_text(response) -> str:
    return response.get_data(as_text=True)


def test_a_changed_form_is_estimated_again_before_it_starts(app, dashboard, seeded):
    token = csrf_token(dashboard)
    seen = fingerprint(form_values(form(token)))
    # The user widened the selection after the estimate: the new estimate, nothing started.
    body = form(token, **{"calls.tool": "", "confirm": seen})
    part = page(dashboard.post("/studies", data=body, headers=HTMX))
    assert "The form changed" in part.one(".notice").text
    assert part.select(".study-stats .stat")[0].text.startswith("5")
    assert studies_stored(app) == 0


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"connection": ""}, "connection", "pick a model connection"),
        ({"connection": "nope"}, "connection", "no model connection"),
        ({"calls.status": "bogus"}, "calls.status", "must be one of"),
        ({"calls.from": "yesterday"}, "calls.from", "must be a date"),
        ({"calls.tool": "no_such_tool"}, "conversations", "match no conversation"),
        ({"selection": "list", "list.range": "2y"}, "list.range", ""),
        ({"selection": "ids", "ids": ""}, "ids", "at least one"),
        ({"selection": "ids", "ids": "orders-1, nope"}, "conversations", "no such conversation"),
        ({"a.preset": "recorded"}, "a.preset", "only B"),
        ({"max_cost_usd": "lots"}, "max_cost_usd", "amount in USD"),
        ({"concurrency": "99"}, "concurrency", "between 1 and 32"),
        ({"as_of": "turn:9"}, "variants.a.as_of", "no turn 9"),
    ],
)
def test_what_cannot_start_says_which_field(app, dashboard, seeded, fields, field, words):
    token = csrf_token(dashboard)
    part = page(dashboard.post("/studies/preview", data=form(token, **fields), headers=HTMX))
    error = part.one(".study-refusal")
    assert error.one(".mono").text == field, error.text
    assert words in error.text
    assert not part.select('button[name="confirm"]')


def test_selected_by_calls_status_and_only_this_projects(
    app, dashboard, seeded, other_project_key, fake
):
    docs_conversation(app, other_project_key.project_id, "theirs-docs")
    token = csrf_token(dashboard)
    body = form(token, **{"calls.tool": "", "calls.status": "error", "b.preset": "recorded"})
    part = page(dashboard.post("/studies/preview", data=body, headers=HTMX))
    assert part.select(".study-stats .stat")[0].text.startswith("1")  # docs-1 only
    assert part.select(".study-stats .stat")[1].text.startswith("1")  # B is not sent
    assert "nothing is sent" in part.select(".study-estimate-table tbody tr")[1].text
    started = dashboard.post("/studies", data=dict(body, confirm=fingerprint(form_values(body))))
    assert started.status_code == 303
    finish(app)
    with app.app_context():
        runs = db.session.query(ModelRun).all()
        assert len(runs) == 1 and runs[0].variant == "a"
        study = db.session.query(Study).one()
        assert study.spec["conversations"] == [OTHER]
        assert study.spec["calls"] == {"status": "error"}
        db.session.remove()


def test_the_form_without_a_connection_says_where_to_add_one(app, dashboard, project_key):
    doc = page(dashboard.get("/studies"))
    assert "No model connection" in doc.one(".study-form .run-error").text
    assert doc.one(".study-submit button").attrs.keys() >= {"disabled"}
    assert "No study yet" in doc.one(".empty").text


def test_without_htmx_the_preview_is_the_whole_page(app, dashboard, seeded):
    token = csrf_token(dashboard)
    doc = page(dashboard.post("/studies/preview", data=form(token, max_tokens="100")))
    assert doc.one("details#start").attrs.keys() >= {"open"}
    assert doc.one('input[name="max_tokens"]').get("value") == "100"  # the form kept
    assert doc.one("#study-preview .study-stats")
    assert FRESH["freshness"] == "off" and len(CIDS) == 4


def test_the_list_reads_the_same_statements_however_many_studies(
    app, dashboard, seeded, count_queries
):
    with app.app_context():
        pid = seeded.project_id
        db.session.remove()
    start(app, pid, cids=["orders-1"])
    one, _ = count_get(dashboard, count_queries, "/studies")
    for _ in range(3):
        start(app, pid, cids=["orders-2", "orders-3"])
    many, response = count_get(dashboard, count_queries, "/studies")
    assert len(page(response).select(".study-list tbody tr")) == 4
    assert many == one
