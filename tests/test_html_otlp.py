"""The dashboard for OTLP conversations: where each message came from, calls whose content was
not captured (and the hint naming the switch), and the trace view of the spans behind a
conversation (escaped, bounded, a constant number of queries)."""

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
