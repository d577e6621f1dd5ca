"""Foldable JSON (issue 23): the call panel's arguments and response and the replay's raw JSON
are rendered as a tree of spans (each value a ``.jn``, each non-empty object or array's inside a
``.jk``) whose text is still the pretty-printed JSON; within bounds of size, count and depth
only, everything escaped. The folding and the copy buttons are tested in Chromium
(tests/test_browser_keys_and_json.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import factories as f
import pytest
from dashboard_support import HTMX, dashboard_fixture, data, page  # noqa: F401
from html_dom import parse
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation
from webapp.views.highlight import (
    FOLD_TREE_DEPTH,
    FOLD_TREE_NODES,
    fold_tree,
    highlight_json_text,
    pretty_json,
    render_text,
    render_value,
)

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</pre><script>alert(2)</script>",
    '<span class="jn"><span class="jk">fake</span></span>',
    "&lt;already&gt; &amp; escaped",
    "\u2028\u2029\x00 control",
]

NESTED = {
    "query": "revenue",
    "results": [
        {"title": "Q3 report", "score": 0.91, "tags": ["finance", "q3"], "meta": {}},
        {"title": "Q4 plan", "score": 0.5, "tags": [], "meta": {"draft": True, "by": None}},
    ],
    "paging": {"next": None, "total": 2},
}


def _check_tree(value):
    html = fold_tree(value)
    assert html is not None
    doc = parse(f"<pre>{html}</pre>")
    # Only our own spans, with our own attributes; the text is the pretty-printed JSON.
    assert {n.tag for n in doc.iter()} <= {"pre", "span"}
    assert all(set(n.attrs) <= {"class", "data-n"} for n in doc.iter())
    assert doc.text == pretty_json(value)
    return doc


def test_each_value_is_a_node_and_each_container_has_an_inside():
    doc = _check_tree(NESTED)
    nodes = doc.select("span.jn")
    # The root, its 3 keys, 2 results of 4 keys each, 2 tags, 2 meta keys, 2 paging keys.
    assert len(nodes) == 1 + 3 + 2 + 2 * 4 + 2 + 2 + 2
    # Non-empty containers fold: their opening bracket says what folding hides.
    assert [n.get("data-n") for n in doc.select("span.jo")] == [
        "3 keys", "2 items", "4 keys", "2 items", "4 keys", "2 keys", "2 keys",
    ]  # fmt: skip
    assert len(doc.select("span.jk")) == 7
    assert [k.text for k in doc.select("span.j-key")][:3] == ['"query"', '"results"', '"title"']


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_keys_and_values_are_text(payload):
    _check_tree({payload: [payload, {"nested": payload, payload: {payload: 1}}], "n": 1})


def test_scalars_and_empty_containers_are_single_nodes():
    for value in ("text", 3, 2.5, True, [], {}, [[]], {"a": {}}):
        _check_tree(value)


def test_depth_is_bounded_deeper_values_are_highlighted_text():
    value: object = "bottom"
    for level in range(FOLD_TREE_DEPTH + 15):
        value = {"level": level, "inner": value} if level % 2 else [value]
    doc = _check_tree(value)
    # Only the first FOLD_TREE_DEPTH levels fold; the rest reads as text in the last node.
    assert len(doc.select("span.jk")) == FOLD_TREE_DEPTH
    deepest = doc.select("span.jk")[-1]
    assert deepest.select("span.j-str") and not deepest.select("span.jk")


def test_too_many_values_fall_back_to_the_highlighted_text():
    many = list(range(FOLD_TREE_NODES))  # the list itself is one more
    assert fold_tree(many) is None
    rendered = render_value(many, limit=None, tree=True)
    assert not rendered.foldable
    assert rendered.html == highlight_json_text(pretty_json(many))
    assert fold_tree(many[:-1]) is not None


def test_a_folded_long_value_is_not_a_tree_and_render_defaults_stay_text():
    long = {"text": "x" * 5000}
    assert not render_value(long, tree=True).foldable  # cut short: the plain beginning
    assert render_value(long, limit=None, tree=True).foldable
    assert not render_value(NESTED).foldable  # the tree is asked for
    assert render_text(json.dumps(NESTED), tree=True).foldable
    assert not render_text("plain words", tree=True).foldable


def _call(app, project_id: int, arguments, response: str) -> int:
    with data(app):
        conv = f.conversation(project_id, "tree-1", title="Tree")
        at = datetime.now(UTC)
        f.message(conv, "tree-u", "user", "Look it up", at=at)
        msg = f.message(conv, "tree-a", "assistant", "Done.", at=at, status="completed")
        f.calls(msg, 0, [f.Call("lookup", arguments, response)], at=at)
    with app.app_context():
        return db.session.scalar(
            select(ToolInvocation.id).where(ToolInvocation.function_name == "lookup")
        )


def test_call_panel_arguments_and_response_are_trees(app, dashboard, project_key):
    # (PostgreSQL's JSONB holds no NUL character.)
    hostile = {h: {"inner": [h, {h: h}]} for h in HOSTILE[:-1]}
    cid = _call(app, project_key.project_id, hostile, json.dumps(NESTED))
    doc = page(dashboard.get(f"/calls/{cid}", headers=HTMX))
    arguments = doc.one(f"#call-{cid}-arguments pre.json.jtree")
    assert json.loads(arguments.text) == hostile
    assert not doc.select("script") and not doc.select("img")
    response = doc.one(f"#call-{cid}-response pre.json.jtree")
    assert response.text == pretty_json(NESTED)
    assert len(response.select("span.jk")) == 7


def test_call_panel_long_response_is_text_until_shown_whole(app, dashboard, project_key):
    long = {"items": [{"n": i, "text": "y" * 40} for i in range(200)]}
    cid = _call(app, project_key.project_id, NESTED, json.dumps(long))
    doc = page(dashboard.get(f"/calls/{cid}", headers=HTMX))
    folded = doc.one(f"#call-{cid}-response pre.json")
    assert "jtree" not in folded.classes and not folded.select("span.jn")
    whole = page(dashboard.get(f"/calls/{cid}/response", headers=HTMX))
    tree = whole.one("pre.json.jtree")
    assert json.loads(tree.text) == long


def test_replay_raw_json_is_a_tree(app, dashboard, project_key):
    with data(app):
        conv_id = f.support_conversation(project_key.project_id).id
    doc = page(dashboard.get(f"/conversations/{conv_id}/replay?view=json"))
    raw = doc.one("pre#replay-raw-json")
    assert "jtree" in raw.classes
    payload = json.loads(raw.text)
    assert payload["messages"] and raw.select("span.jk")
