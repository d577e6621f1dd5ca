"""Server-side display of untrusted content: highlighting escapes first, folding, summaries."""

from __future__ import annotations

import json

import pytest
from html_dom import parse
from markupsafe import Markup

from webapp.views.highlight import (
    fold,
    highlight_json_text,
    render_text,
    render_value,
    short_arguments,
)

HOSTILE = [
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "</pre><script>alert(2)</script>",
    '<span class="j-key">fake</span>',
    "&lt;already&gt; &amp; escaped",
    "javascript:alert(3)",
    "\u2028\u2029\x00 control",
]


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_json_values_and_keys_come_out_as_text(payload):
    value = {payload: [payload, {"nested": payload}], "n": 1}
    html = render_value(value).html
    doc = parse(f"<pre>{html}</pre>")
    # Only our own spans, and the text reads exactly like the pretty-printed JSON.
    assert {n.tag for n in doc.iter()} <= {"pre", "span"}
    assert all(set(n.attrs) <= {"class"} for n in doc.iter())
    assert doc.text == json.dumps(value, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("payload", HOSTILE)
def test_hostile_plain_text_is_escaped(payload):
    html = render_text(payload).html
    assert isinstance(html, Markup)
    doc = parse(f"<div>{html}</div>")
    assert [n.tag for n in doc.iter()] == ["div"]
    assert doc.text == payload


def test_tokens_are_classified():
    html = highlight_json_text('{"a": "b", "n": -1.5e3, "t": true, "z": null}')
    doc = parse(f"<pre>{html}</pre>")
    classes = {n.text: n.get("class") for n in doc.select("span")}
    assert classes['"a"'] == "j-key"
    assert classes['"b"'] == "j-str"
    assert classes["-1.5e3"] == "j-num"
    assert classes["true"] == "j-lit" and classes["null"] == "j-lit"


def test_a_string_cut_by_folding_is_still_escaped():
    text = '{"k": "<script>' + "x" * 50
    doc = parse(f"<pre>{highlight_json_text(text)}</pre>")
    assert not doc.select("script")
    assert doc.text == text


def test_results_that_are_json_containers_are_pretty_printed():
    rendered = render_text('[{"source_number": 1}]')
    assert rendered.kind == "json"
    assert "\n" in parse(f"<p>{rendered.html}</p>").text
    assert render_text('"just a string"').kind == "text"
    assert render_text("42").kind == "text"
    assert render_text("{broken").kind == "text"
    assert render_text(None).kind == "none"
    assert render_text('  {"a": 1}').kind == "json"


def test_long_content_is_folded_at_a_line_end():
    value = {f"key{i}": "v" * 30 for i in range(400)}
    rendered = render_value(value, limit=1000)
    assert rendered.folded
    assert rendered.shown_chars <= 1000 < rendered.total_chars
    shown = parse(f"<p>{rendered.html}</p>").text
    assert shown.endswith(",")  # cut after a complete line
    assert not render_value(value, limit=None).folded


def test_fold_cuts_long_single_lines_at_the_limit():
    assert fold("x" * 50, 10) == ("x" * 10, True)
    assert fold("short", 10) == ("short", False)


def test_short_arguments():
    assert short_arguments({"query": "revenue", "top_k": 5}) == 'query="revenue", top_k=5'
    assert short_arguments(None) == ""
    assert short_arguments({}) == ""
    long = short_arguments({"text": "word " * 100}, limit=40)
    assert len(long) == 40 and long.endswith("…")
    assert short_arguments({"multi": "a\nb"}) == 'multi="a\\nb"'
