"""Agent content is untrusted: every page shows it as text, and none of it becomes markup."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import factories as f
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401
from html_dom import parse
from sqlalchemy import select

from webapp.db import db
from webapp.models import RedactionRule, ToolDefinition, ToolInvocation

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
ATTR = '" onmouseover="alert(2)'


def hostile_conversation(project_id: int) -> int:
    now = datetime.now(UTC)
    conv = f.conversation(
        project_id,
        f"conv-{XSS}",
        title=f"Title {XSS}",
        channel_name=f"chan {XSS}",
        meta={XSS: ATTR},
        system_prompt=f"System {XSS}",
    )
    db.session.add(ToolDefinition(conversation_id=conv.id, name=f"def {XSS}"))
    f.message(conv, f"user-{XSS}", "user", f"User says {XSS}", at=now)
    msg = f.message(
        conv, f"asst-{ATTR}", "assistant", f"Answer {XSS} [source1]", at=now,
        status="failed", model=f"model {XSS}",
    )  # fmt: skip
    f.calls(
        msg,
        0,
        [
            f.Call(f"fn {XSS}", {XSS: ATTR, "nested": [XSS]}, f"Result {XSS}",
                   started_ms=0, duration_ms=10, redactions=[f"rule {XSS}"],
                   external_id=f"id {ATTR}"),
            f.Call(ATTR, None, json.dumps({XSS: [XSS, ATTR]}), started_ms=1, duration_ms=5),
        ],
        at=now,
    )  # fmt: skip
    db.session.add(RedactionRule(project_id=project_id, name=f"rule {XSS}", kind="skip", value=[]))
    return conv.id


def assert_inert(doc) -> None:
    """No script but ours, no handler attributes, no javascript: URLs."""
    for script in doc.select("script"):
        assert (script.get("src") or "").startswith("/static/"), script.attrs
    for element in doc.iter():
        assert element.tag != "img" or element.get("src") != "x"
        handlers = [name for name in element.attrs if name.startswith("on")]
        assert not handlers, (element.tag, element.attrs)


def test_every_page_shows_hostile_content_as_text(app, dashboard, project_key):
    with data(app):
        conv_id = hostile_conversation(project_key.project_id)
    with app.app_context():
        call_ids = db.session.scalars(select(ToolInvocation.id).order_by(ToolInvocation.id)).all()
    urls = [
        "/conversations",
        f"/conversations?q={XSS}",
        f"/conversations/{conv_id}",
        f"/conversations/{conv_id}?cursor=x",  # an error page repeats nothing harmful
        *[f"/calls/{cid}" for cid in call_ids],
        f"/calls/{call_ids[0]}/arguments",
        f"/calls/{call_ids[0]}/response",
        "/tools",
        f"/tools/usage?name=fn {XSS}",
        "/settings",
    ]
    for url in urls:
        for headers in ({}, HTMX):
            response = dashboard.get(url, headers=headers)
            assert response.status_code in (200, 422), url
            assert_inert(parse(response.data))

    conversation = page(dashboard.get(f"/conversations/{conv_id}"))
    text = conversation.text
    for visible in (f"Title {XSS}", f"User says {XSS}", f"fn {XSS}", f"chan {XSS}", f"model {XSS}"):
        assert visible in text
    assert conversation.one("h1").text == f"Title {XSS}"
    cards = conversation.select(".call-card .fn")
    assert [c.text for c in cards] == [f"fn {XSS}", ATTR]

    detail = page(dashboard.get(f"/calls/{call_ids[0]}"))
    arguments = json.loads(detail.one(f"#call-{call_ids[0]}-arguments pre").text)
    assert arguments == {XSS: ATTR, "nested": [XSS]}
    assert detail.one(f"#call-{call_ids[0]}-response pre").text == f"Result {XSS}"
    assert f"rule {XSS}" in detail.one(".facts").text
    assert f"id {ATTR}" in detail.one(".facts").text


def test_the_waterfall_figure_escapes_names_for_plotly(app, dashboard, project_key):
    with data(app):
        conv_id = hostile_conversation(project_key.project_id)
    chart = page(dashboard.get(f"/conversations/{conv_id}")).one(".chart")
    figure = json.loads(chart.get("data-figure"))
    labels = [label for trace in figure["data"] for label in trace["y"]]
    assert all("<" not in label and ">" not in label for label in labels)
    assert "&lt;script&gt;" in labels[0]


def test_json_twins_carry_the_raw_values(app, dashboard, project_key):
    with data(app):
        conv_id = hostile_conversation(project_key.project_id)
    response = dashboard.get(f"/conversations/{conv_id}.json")
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert body["conversation"]["title"] == f"Title {XSS}"
    call = body["messages"][1]["run"]["rounds"][0]["calls"][0]["call"]
    assert call["function_name"] == f"fn {XSS}" and call["arguments"][XSS] == ATTR
