"""MCP calls through the write path (docs/otlp-mapping.md, 'MCP calls'): model calls, MCP client
spans and MCP server spans, each in traces of their own, sent in any order and batching, end
with the same calls and MCP details; the details go with their call when it is rewritten."""

from __future__ import annotations

import itertools

import pytest
from sqlalchemy import select

from tests.otlp_support import agent_run, traces_json, traces_protobuf
from tests.test_api_otlp import post
from tests.test_otlp_mcp import _exec_starts, _mcp2, _tool_spans_out
from webapp.db import db
from webapp.models import McpCall, ToolInvocation


def _batches():
    """Bare per-call model traces (round 0 and 1), the MCP client spans (their own traces) and
    the MCP server spans (under the clients, from the server's service)."""
    run = agent_run(1, rounds=2, agent=False, per_call_traces=True)
    llm = _tool_spans_out(run)
    clients, servers = [], []
    for n, ((_r, k), start) in enumerate(sorted(_exec_starts(run).items())):
        client, server = _mcp2(700 + n, 7000 + n * 2, f"tool_{k}", start, rid=n + 1)
        clients.append(client)
        servers.append(server)
    return {"llm": llm, "clients": clients, "servers": servers}


def _rows(app, project_id):
    with app.app_context():
        return sorted(
            (
                call.function_name,
                call.external_tool_call_id,
                call.response,
                row.server if row else None,
                row.request_id if row else None,
                row.server_duration_ms if row else None,
            )
            for call, row in db.session.execute(
                select(ToolInvocation, McpCall)
                .outerjoin(McpCall, McpCall.tool_invocation_id == ToolInvocation.id)
                .where(ToolInvocation.project_id == project_id)
            )
        )


EXPECTED = [
    ("tool_0", "call_1_0_0", "result 1/0/0", "weather-mcp", "1", 0.002),
    ("tool_1", "call_1_0_1", "result 1/0/1", "weather-mcp", "2", 0.002),
]


@pytest.mark.parametrize("order", list(itertools.permutations(["llm", "clients", "servers"])))
def test_any_arrival_order_ends_with_each_call_and_its_mcp_details(app, client, project_key, order):
    batches = _batches()
    for name in order:
        assert post(client, project_key, traces_protobuf(batches[name])).status_code == 200
    assert _rows(app, project_key.project_id) == EXPECTED


def test_one_span_per_request_newest_first_twice(app, client, project_key):
    spans = [s for batch in _batches().values() for s in batch]
    spans.sort(key=lambda s: (s.start_ns, s.span_id), reverse=True)
    for _ in range(2):
        for span in spans:
            body = traces_json([span])
            assert (
                post(client, project_key, body, content_type="application/json").status_code == 200
            )
    assert _rows(app, project_key.project_id) == EXPECTED
