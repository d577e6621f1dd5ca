"""The call detail panel: pretty-printed, folded, sized, copyable, linked to the replay."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import factories as f
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation


def call_id(app, name: str) -> int:
    with app.app_context():
        return db.session.scalar(
            select(ToolInvocation.id).where(ToolInvocation.function_name == name).limit(1)
        )


def test_detail_fragment_shows_arguments_response_sizes_and_links(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    cid = call_id(app, "search_kb")
    doc = page(dashboard.get(f"/calls/{cid}", headers=HTMX))
    assert not doc.select("html")  # a fragment for the side panel
    assert doc.one(".detail-head h2").text == "search_kb"
    facts = {
        dt.text: dd.text.strip() for dt, dd in zip(doc.select("dt"), doc.select("dd"), strict=True)
    }
    assert facts["Tool call id"].startswith("call_")
    assert facts["Arguments"] == "38 B · 10 tokens"
    assert facts["Response"].startswith("219 B · 55 tokens")
    assert facts["Tokens by"] == "heuristic:chars/4"
    assert "420 ms" in facts["Ran"]
    arguments = doc.one(f"#call-{cid}-arguments pre.json")
    assert json.loads(arguments.text) == {"query": "refund policy", "top_k": 3}
    assert arguments.select("span.j-key")
    response = doc.one(f"#call-{cid}-response pre.json")
    assert json.loads(response.text)[0]["title"] == "Refund policy"
    assert [b.text for b in doc.select(".badges .badge")] == ["would be compacted"]
    copy_urls = [b.get("data-copy-url") for b in doc.select("button.copy")]
    assert copy_urls == [f"/calls/{cid}/arguments.txt", f"/calls/{cid}/response.txt"]
    replay_link = doc.select(".detail-actions a")[0].get("href")
    assert replay_link.endswith(f"#call-{cid}") and f"/{conv_id}" in replay_link


def test_detail_as_a_page_of_its_own_and_as_json(app, dashboard, project_key):
    with data(app):
        f.support_conversation(project_key.project_id)
    cid = call_id(app, "get_customer")
    doc = page(dashboard.get(f"/calls/{cid}"))
    assert doc.select("header.topbar") and doc.one(".detail h2").text == "get_customer"
    assert [c.text for c in doc.select(".facts .chip")] == ["mask-pii"]
    body = dashboard.get(f"/calls/{cid}.json").get_json()
    assert body["call"]["function_name"] == "get_customer"
    assert body["call"]["redactions"] == ["mask-pii"]
    assert json.loads(body["response_text"]) == {"name": "Jane", "tier": "gold"}
    assert [b["kind"] for b in body["badges"]] == ["redacted"]


def test_missing_response_and_errors_are_explained(app, dashboard, project_key):
    with data(app):
        f.support_conversation(project_key.project_id)
    with app.app_context():
        missing = db.session.scalar(
            select(ToolInvocation.id).where(ToolInvocation.response.is_(None)).limit(1)
        )
        failed = db.session.scalar(select(ToolInvocation.id).where(ToolInvocation.is_error))
    doc = page(dashboard.get(f"/calls/{missing}", headers=HTMX))
    assert "No response stored yet" in doc.one(f"#call-{missing}-response").text
    assert len(doc.select("button.copy")) == 1  # nothing to copy from the response
    err = page(dashboard.get(f"/calls/{failed}", headers=HTMX))
    assert err.one(f"#call-{failed}-response pre.text").text == "upstream timeout after 30s"
    assert "error" in [b.text for b in err.select(".badges .badge")]


def test_long_responses_fold_and_show_all_loads_the_rest(app, dashboard, project_key):
    big = json.dumps([{"source_number": i, "text": "lorem ipsum " * 20} for i in range(60)])
    with data(app):
        conv = f.conversation(project_key.project_id, "long-result")
        msg = f.message(conv, "m", "assistant", "ok", at=datetime.now(UTC), status="completed")
        f.calls(msg, 0, [f.Call("search", {"q": "x"}, big)], at=datetime.now(UTC))
    cid = call_id(app, "search")
    doc = page(dashboard.get(f"/calls/{cid}", headers=HTMX))
    folded = doc.one(f"#call-{cid}-response")
    assert len(folded.one("pre").text) < 4100
    more = folded.one("a.show-all")
    full = page(dashboard.get(more.get("hx-get"), headers=HTMX))
    assert json.loads(full.one(f"#call-{cid}-response pre").text) == json.loads(big)
    raw = dashboard.get(f"/calls/{cid}/response.txt")
    assert raw.mimetype == "text/plain" and raw.get_data(as_text=True) == big


def test_other_projects_calls_are_404(app, dashboard, project_key, other_project_key):
    with data(app):
        f.support_conversation(other_project_key.project_id, "theirs")
    cid = call_id(app, "search_kb")
    for url in (
        f"/calls/{cid}",
        f"/calls/{cid}.json",
        f"/calls/{cid}/response",
        f"/calls/{cid}/response.txt",
    ):
        assert dashboard.get(url).status_code == 404, url
    assert dashboard.get("/calls/1/secrets").status_code == 404
