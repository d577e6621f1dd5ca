"""MCP in the dashboard (docs/otlp-mapping.md, 'MCP calls'): the call panel says a call went
through MCP (server, transport, session, JSON-RPC id, its own duration, the error), and the MCP
servers page lists each server with its tools, calls, error rate, latency and the tokens its tool
definitions add to every round that offers them; both with their JSON twins."""

from __future__ import annotations

import json

from dashboard_support import count_get, dashboard_fixture, page  # noqa: F401
from sqlalchemy import select

from tests.otlp_support import agent_run, traces_protobuf
from tests.test_otlp_mcp import _exec_starts, _mcp2, _tool_spans_out
from webapp.db import db
from webapp.models import McpCall, ToolDefinition, ToolInvocation
from webapp.replay.build import tool_definition_tokens
from webapp.replay.history import ToolDefinition as Offered
from webapp.tokens import count_tokens

PB = {"Content-Type": "application/x-protobuf"}
DEFINITIONS = [
    {
        "type": "function",
        "name": f"tool_{k}",
        "description": f"Tool number {k} of the weather server.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "k": {"type": "integer"}},
        },
    }
    for k in range(2)
]


def _ingest(client, key, *, trace=1, error=False, conversation="c-mcp"):
    """A two-round run whose calls went through MCP (spans in their own traces); tool_1 fails
    with `error.type=tool_error` when `error`."""
    run = agent_run(trace, rounds=2, agent=False, per_call_traces=True, conversation=conversation)
    spans = _tool_spans_out(run)
    for span in spans:
        if span.attributes.get("gen_ai.output.messages"):
            span.attributes["gen_ai.tool.definitions"] = json.dumps(DEFINITIONS)
    for n, ((_r, k), start) in enumerate(sorted(_exec_starts(run).items())):
        spans += _mcp2(
            trace * 100 + n,
            trace * 1000 + n * 2,
            f"tool_{k}",
            start,
            rid=n + 1,
            error=error and k == 1,
        )
    response = client.post("/v1/traces", data=traces_protobuf(spans), headers={**PB, **key.headers})
    assert response.status_code == 200


def _call_ids(app, project_id):
    with app.app_context():
        return dict(
            db.session.execute(
                select(ToolInvocation.function_name, ToolInvocation.id).where(
                    ToolInvocation.project_id == project_id
                )
            ).all()
        )


def test_the_call_panel_says_the_call_went_through_mcp(app, dashboard, project_key):
    _ingest(dashboard, project_key, error=True)
    ids = _call_ids(app, project_key.project_id)
    doc = page(dashboard.get(f"/calls/{ids['tool_1']}"))
    facts = doc.one("[data-mcp]")
    text = " ".join(facts.text.split())
    assert "weather-mcp" in text
    assert "tools/call" in text and "pipe" in text
    assert "sess-1" in text and "2025-11-25" in text
    assert "JSON-RPC id 2" in text
    assert "tool_error" in text
    assert facts.one("a").get("href").endswith(f"/{hex(1 * 1000 + 2)[2:].rjust(16, '0')}")
    twin = dashboard.get(f"/calls/{ids['tool_1']}.json").get_json()
    assert twin["mcp"]["server"] == "weather-mcp"
    assert twin["mcp"]["request_id"] == "2"
    assert twin["mcp"]["error_type"] == "tool_error"
    assert twin["mcp"]["duration_ms"] == 0.004
    assert twin["call"]["is_error"] is True
    # A call that did not go through MCP says nothing of it.
    _ingest(dashboard, project_key, trace=2, conversation="c-plain")
    with app.app_context():
        db.session.execute(McpCall.__table__.delete())
        db.session.commit()
    assert page(dashboard.get(f"/calls/{ids['tool_0']}")).select("[data-mcp]") == []
    assert dashboard.get(f"/calls/{ids['tool_0']}.json").get_json()["mcp"] is None


def test_the_mcp_servers_page_lists_servers_tools_errors_latency_and_definition_tokens(
    app, dashboard, project_key, count_queries
):
    _ingest(dashboard, project_key, trace=1, error=True, conversation="c-1")
    _ingest(dashboard, project_key, trace=2, conversation="c-2")
    tools_page = page(dashboard.get("/tools"))
    assert "/tools/mcp" in [a.get("href") for a in tools_page.select("a")]
    doc = page(dashboard.get("/tools/mcp"))
    (row,) = doc.select("tr[data-server]")
    assert row.get("data-server") == "weather-mcp"
    assert [a.text for a in row.select("a.chip")] == ["tool_0", "tool_1"]
    twin = dashboard.get("/tools/mcp.json").get_json()
    (server,) = twin["data"]
    assert server["server"] == "weather-mcp"
    assert server["calls"] == 4 and server["errors"] == 1
    assert server["p50_ms"] == 0.004 and server["p95_ms"] == 0.004
    assert server["transports"] == ["pipe"]
    assert [(t["name"], t["calls"], t["errors"]) for t in server["tools"]] == [
        ("tool_0", 2, 0),
        ("tool_1", 2, 1),
    ]
    # The definitions as the model is sent them, with gpt-4o-mini's tokenizer (o200k_base).
    with app.app_context():
        stored = db.session.scalars(select(ToolDefinition).order_by(ToolDefinition.name)).all()
        expected = sum(
            tool_definition_tokens(
                Offered(d.name, d.description, d.parameters),
                lambda t: count_tokens(t, "gpt-4o-mini"),
            )
            for d in stored[:2]
        )
    assert expected > 20
    assert server["definition_tokens"] == expected
    assert server["tokenizer"] == "o200k_base"
    assert server["rounds_offering"] == 4  # two rounds in each of the two conversations
    assert "o200k_base" in row.text
    # A constant number of statements whatever the number of servers and calls.
    few, _ = count_get(dashboard, count_queries, "/tools/mcp")
    _ingest(dashboard, project_key, trace=3, conversation="c-3")
    more, _ = count_get(dashboard, count_queries, "/tools/mcp")
    assert few == more


def test_no_mcp_calls_yet(dashboard, project_key):
    doc = page(dashboard.get("/tools/mcp"))
    assert doc.select("tr[data-server]") == []
    assert "No MCP calls yet" in doc.one(".empty").text
    assert dashboard.get("/tools/mcp.json").get_json() == {"object": "list", "data": []}
