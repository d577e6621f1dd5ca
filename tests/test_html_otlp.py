"""The dashboard for OTLP conversations: where each message came from, calls whose content was
not captured (and the hint naming the switch), and the trace view of the spans behind a
conversation (escaped, bounded, a constant number of queries, each trace a tree under its header
with its waterfall)."""

from __future__ import annotations

from dashboard_support import HTMX, count_get, dashboard_fixture, page  # noqa: F401

from tests.api_support import raw_rows
from tests.otlp_support import agent_run, make_span, traces_protobuf

PB = {"Content-Type": "application/x-protobuf"}


def _ingest(client, key, spans) -> int:
    response = client.post("/v1/traces", data=traces_protobuf(spans), headers={**PB, **key.headers})
    assert response.status_code == 200
    return response


def _conversation_id(app, external_id: str) -> int:
    return raw_rows(app, f"SELECT id FROM conversation WHERE external_id = '{external_id}'")[0][0]


def test_messages_say_where_they_came_from(app, dashboard, project_key):
    _ingest(dashboard, project_key, agent_run(1, conversation="c-otlp").spans)
    native = dashboard.post(
        "/api/v1/conversations/c-otlp/messages",
        json={"messages": [{"id": "note-1", "role": "user", "content": "Added by hand"}]},
        headers=project_key.headers,
    )
    assert native.status_code == 201
    doc = page(dashboard.get(f"/conversations/{_conversation_id(app, 'c-otlp')}"))
    sources = [m.one(".source").text.strip() for m in doc.select("article.msg")]
    assert sources == ["OTLP", "OTLP", "API"]
    assert doc.one("a.trace-link").get("href").endswith("/trace")


def test_calls_without_content_are_labelled_and_the_page_names_the_switch(
    app, dashboard, project_key
):
    run = agent_run(2, rounds=2, content=False, conversation="c-off")
    for span in run.spans:
        span.scope_name = "pydantic-ai"
    _ingest(dashboard, project_key, run.spans)
    doc = page(dashboard.get(f"/conversations/{_conversation_id(app, 'c-off')}"))
    calls = doc.select(".call-card")
    assert calls and all("content not captured" in c.text for c in calls)
    assert not any("no response" in c.text.lower() for c in calls)
    hint = doc.one(".otlp-hint")
    assert "does not capture message content" in hint.text
    assert "include_content=True" in hint.text
    # Nothing is missing: the header does not count these calls as waiting for a response.
    waiting = next(s for s in doc.select(".stat") if "without response" in s.text)
    assert waiting.one(".stat-value").text.strip() == "0"
    # No user message was captured, yet the run is a turn (not "0 turns").
    turns = next(s for s in doc.select(".stat") if s.one(".stat-label").text == "turns")
    assert turns.one(".stat-value").text.strip() == "1"
    listing = page(dashboard.get("/conversations?missing_responses=1"))
    assert listing.select("tr[data-row-id]") == []


def test_a_conversation_with_content_shows_no_hint(app, dashboard, project_key):
    _ingest(dashboard, project_key, agent_run(3, conversation="c-on").spans)
    doc = page(dashboard.get(f"/conversations/{_conversation_id(app, 'c-on')}"))
    assert doc.select(".otlp-hint") == []


def test_the_trace_view_lists_the_spans_as_a_tree_escaped(app, dashboard, project_key):
    run = agent_run(4, rounds=2, conversation="c-trace")
    hostile = make_span(
        4,
        4999,
        "<script>alert(1)</script>",
        run.spans[0].start_ns,
        run.spans[0].end_ns,
        {"note": "<img src=x onerror=alert(1)>"},
        parent=4 * 1000 + 1,
    )
    _ingest(dashboard, project_key, [*run.spans, hostile])
    conversation_id = _conversation_id(app, "c-trace")
    response = dashboard.get(f"/conversations/{conversation_id}/trace")
    assert b"<script>alert(1)" not in response.data and b"<img src=x" not in response.data
    doc = page(response)
    rows = doc.select("tr.trace-span")
    assert len(rows) == len(run.spans) + 1
    first = rows[0]
    assert "invoke_agent weather_agent" in first.text
    assert "trace-depth-0" in first.one("td.trace-name").classes
    assert all("trace-depth-1" in r.one("td.trace-name").classes for r in rows[1:])
    twin = dashboard.get(f"/conversations/{conversation_id}/trace.json").get_json()
    assert twin["total"] == len(rows)
    assert {s["span_class"] for s in twin["spans"]} == {"agent", "llm", "tool", "other"}


def test_the_trace_view_runs_a_constant_number_of_queries(
    app, dashboard, project_key, count_queries
):
    _ingest(dashboard, project_key, agent_run(5, rounds=1, conversation="small").spans)
    big = [s for n in range(6, 16) for s in agent_run(n, rounds=3, conversation="big").spans]
    _ingest(dashboard, project_key, big)
    small_count, _ = count_get(
        dashboard, count_queries, f"/conversations/{_conversation_id(app, 'small')}/trace"
    )
    big_count, _ = count_get(
        dashboard, count_queries, f"/conversations/{_conversation_id(app, 'big')}/trace"
    )
    assert small_count == big_count


def test_the_conversation_page_queries_do_not_grow_with_otlp_turns(
    app, dashboard, project_key, count_queries
):
    _ingest(dashboard, project_key, agent_run(20, conversation="one", content=False).spans)
    many = [
        s for n in range(21, 31) for s in agent_run(n, conversation="many", content=False).spans
    ]
    _ingest(dashboard, project_key, many)
    one, _ = count_get(dashboard, count_queries, f"/conversations/{_conversation_id(app, 'one')}")
    ten, _ = count_get(dashboard, count_queries, f"/conversations/{_conversation_id(app, 'many')}")
    assert one == ten


def test_the_live_view_shows_a_run_filling_in(app, dashboard, project_key):
    run = agent_run(40, rounds=2, agent=False, conversation="c-live")
    _ingest(dashboard, project_key, run.spans[:1])
    conversation_id = _conversation_id(app, "c-live")
    doc = page(dashboard.get(f"/conversations/{conversation_id}"))
    url = doc.one("#live").get("hx-get")
    _ingest(dashboard, project_key, run.spans[1:])
    update = page(dashboard.get(url, headers=HTMX))
    refreshed = update.select("article.msg")
    assert refreshed, "the assistant message is refreshed in place"
    assert any("completed" in " ".join(m.classes) or "Sunny" in m.text for m in refreshed)


def test_the_trace_view_shows_each_trace_as_a_tree_with_its_waterfall(app, dashboard, project_key):
    first = agent_run(40, rounds=2, conversation="c-two")
    second = agent_run(41, rounds=2, conversation="c-two", start=first.spans[0].start_ns + 10**9)
    tool = next(s for s in first.spans if s.name.startswith("execute_tool"))
    failed = make_span(40, 40999, "GET weather", tool.start_ns, tool.end_ns, {}, 40100, status=2)
    _ingest(dashboard, project_key, [*second.spans, *first.spans, failed])
    conversation_id = _conversation_id(app, "c-two")
    doc = page(dashboard.get(f"/conversations/{conversation_id}/trace"))
    groups = doc.select("details.trace-group")
    assert [g.get("data-trace-id") for g in groups] == [f"{40:032x}", f"{41:032x}"]
    head = groups[0].one(".trace-head").text
    assert f"{40:032x}" in head and "6 spans" in head and "1 error" in head
    assert "after the first trace" in groups[1].one(".trace-head").text
    rows = groups[0].select("tr.trace-span")
    depth = {r.get("data-span-id"): int(r.get("data-depth")) for r in rows}
    assert depth[f"{40001:016x}"] == 0 and depth[f"{40100:016x}"] == 1
    assert depth[f"{40999:016x}"] == 2
    cell = next(r for r in rows if r.get("data-span-id") == f"{40999:016x}").one("td.trace-name")
    assert "--depth: 2" in cell.get("style")
    failing = next(r for r in rows if r.get("data-span-id") == f"{40999:016x}")
    assert "trace-error" in failing.classes
    # A toggle only where there is something to fold; hidden until the script shows it.
    toggles = [r for r in rows if r.select("[data-trace-toggle]")]
    assert {r.get("data-span-id") for r in toggles} == {f"{40001:016x}", f"{40100:016x}"}
    assert all("hidden" in t.one("[data-trace-toggle]").attrs for t in toggles)
    agent_bar = rows[0].one(".trace-bar")
    assert agent_bar.get("style").startswith("left: 0.0%; width: 100.0%")
    assert "starts at" in agent_bar.get("title") and "lasts" in agent_bar.get("title")
    twin = dashboard.get(f"/conversations/{conversation_id}/trace.json").get_json()
    assert [(t["trace_id"], t["span_count"], t["error_count"]) for t in twin["traces"]] == [
        (f"{40:032x}", 6, 1),
        (f"{41:032x}", 5, 0),
    ]
    by_id = {s["span_id"]: s for s in twin["spans"]}
    agent = by_id[f"{40001:016x}"]
    assert agent["depth"] == 0 and f"{40100:016x}" in agent["children"]
    assert by_id[f"{40999:016x}"]["parent_span_id"] == f"{40100:016x}"
    assert all(0 <= s["bar_left"] <= 100 and 0 <= s["bar_width"] <= 100 for s in twin["spans"])
