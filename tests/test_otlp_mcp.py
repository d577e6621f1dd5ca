"""MCP calls inside their round (docs/otlp-mapping.md, 'MCP calls'): an MCP `tools/call` span,
client or server side, mcp 2.x native or mcp 1.x with OpenLLMetry's instrumentation, wrapped or
in its own trace, enriches the model's call it executed and is never a call of its own. Pure
rules: normalized records in, plans out."""

from __future__ import annotations

import dataclasses
import json
import random as random_module

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.otlp_support import T0, agent_run, hex_id, make_span
from webapp.ingest.otlp import mcp
from webapp.ingest.otlp.links import record_links
from webapp.ingest.otlp.normalize import normalize_span
from webapp.ingest.otlp.projection import project

SERVER, CLIENT, INTERNAL = 2, 3, 1


def _project(spans):
    return project([normalize_span(s) for s in spans])


def _calls(plans):
    return [
        (plan.index, call)
        for conversation in plans
        for turn in conversation.turns
        for plan in turn.rounds
        for call in plan.calls
    ]


def _tool_spans_out(run):
    """The run without its execute_tool spans (the MCP spans stand in for them)."""
    return [s for s in run.spans if not s.name.startswith("execute_tool")]


def _mcp2(trace, span, name, start, *, parent=None, server="weather-mcp", error=False, rid=1):
    """mcp 2.x's two spans of one tools/call: the client's and, under it, the server's."""
    client = make_span(
        trace,
        span,
        f"MCP send tools/call {name}",
        start,
        start + 4_000,
        {"mcp.method.name": "tools/call", "jsonrpc.request.id": str(rid)},
        parent=parent,
        kind=CLIENT,
    )
    server_attrs = {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": "2025-11-25",
        "jsonrpc.request.id": str(rid),
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "mcp.session.id": "sess-1",
        "network.transport": "pipe",
    }
    if error:
        server_attrs["error.type"] = "tool_error"
    server_span = make_span(
        trace,
        span + 1,
        f"tools/call {name}",
        start + 1_000,
        start + 3_000,
        server_attrs,
        parent=span,
        kind=SERVER,
        service=server,
        status=2 if error else 0,
    )
    return [client, server_span]


def _mcp1(trace, span, name, arguments, start, *, parent=None, result="ok"):
    """OpenLLMetry's opentelemetry-instrumentation-mcp on mcp 1.x: one client span."""
    attrs = {
        "traceloop.span.kind": "tool",
        "traceloop.entity.name": name,
        "traceloop.entity.input": json.dumps({"tool_name": name, "arguments": arguments}),
        "traceloop.entity.output": json.dumps({"result": result}),
    }
    span_ = make_span(trace, span, f"{name}.tool", start, start + 4_000, attrs, parent=parent)
    return dataclasses.replace(
        span_, scope_name="opentelemetry.instrumentation.mcp.instrumentation"
    )


def _exec_starts(run):
    """Where each round's calls ran: (round, k) -> the execute_tool span's start."""
    out = {}
    for s in run.spans:
        if s.name.startswith("execute_tool"):
            n = s.span_id
            k = int(n, 16) % 10
            r = (int(n, 16) % 1000 - 100) // 10
            out[(r, k)] = s.start_ns
    return out


def test_mcp2_spans_in_their_own_traces_enrich_the_bare_calls_and_add_none():
    run = agent_run(1, rounds=3, agent=False, per_call_traces=True)
    spans = _tool_spans_out(run)
    starts = _exec_starts(run)
    for (r, k), start in starts.items():
        spans += _mcp2(500 + r * 10 + k, 9000 + r * 10 + k * 2, f"tool_{k}", start, rid=r * 10 + k)
    plans = _project(spans)
    assert len(plans) == 1
    calls = _calls(plans)
    assert len(calls) == 4  # the model's calls, no more
    for r, call in calls:
        assert call.mcp is not None, (r, call.function_name)
        assert call.mcp["server"] == "weather-mcp"
        assert call.mcp["transport"] == "pipe"
        assert call.mcp["session_id"] == "sess-1"
        assert call.mcp["protocol_version"] == "2025-11-25"
        assert call.mcp["request_id"] == str(r * 10 + int(call.function_name[-1]))
        assert call.mcp["duration_ms"] == 0.004
        assert call.mcp["server_duration_ms"] == 0.002
        assert call.response == f"result 1/{r}/{call.function_name[-1]}"  # what the model saw
        assert not call.is_error
    # The MCP traces feed the conversation too (trace view, purge).
    turn = plans[0].turns[0]
    assert len(turn.traces) == 3 + 4


def test_mcp2_spans_under_the_agent_span_are_not_extra_calls():
    run = agent_run(2, rounds=2)
    spans = _tool_spans_out(run)
    agent_span = int(next(s.span_id for s in run.spans if s.name.startswith("invoke_agent")), 16)
    for (_r, k), start in _exec_starts(run).items():
        spans += _mcp2(2, 7000 + k * 2, f"tool_{k}", start, parent=agent_span, rid=k)
    calls = _calls(_project(spans))
    assert [(r, c.function_name) for r, c in calls] == [(0, "tool_0"), (0, "tool_1")]
    assert all(c.mcp and c.mcp["request_id"] == c.function_name[-1] for _, c in calls)
    assert all(c.started_ns is not None for _, c in calls)


def test_an_mcp_span_under_an_execute_tool_span_enriches_that_call():
    run = agent_run(3, rounds=2, overlap=True)
    spans = list(run.spans)
    # Each MCP exchange sits under the execute_tool span of its call; both tools are named
    # alike for the window rule, so only the parent tells them apart.
    for s in run.spans:
        if s.name.startswith("execute_tool"):
            k = int(s.span_id, 16) % 10
            spans += _mcp2(
                3,
                8000 + k * 2,
                s.attributes["gen_ai.tool.name"],
                s.start_ns + 10,
                parent=int(s.span_id, 16),
                rid=100 + k,
            )
    calls = _calls(_project(spans))
    assert len(calls) == 2
    for _, call in calls:
        assert call.mcp["request_id"] == f"10{call.function_name[-1]}"
        assert call.external_id  # the execution span's call id still matched


def test_mcp1_client_spans_match_by_name_and_arguments():
    run = agent_run(4, rounds=2, agent=False, per_call_traces=True)
    spans = _tool_spans_out(run)
    starts = _exec_starts(run)
    # Both calls under one tool name: the arguments tell which call each span executed.
    for s in spans:
        if s.attributes.get("gen_ai.output.messages"):
            out = json.loads(s.attributes["gen_ai.output.messages"])
            for part in out[0]["parts"]:
                if part["type"] == "tool_call":
                    part["name"] = "lookup"
            s.attributes["gen_ai.output.messages"] = json.dumps(out)
    # Spans in reverse order of the calls, each with its call's arguments.
    spans += [
        _mcp1(600, 60, "lookup", {"city": "Paris", "k": 1, "r": 0}, starts[(0, 0)], result="B"),
        _mcp1(601, 61, "lookup", {"city": "Paris", "k": 0, "r": 0}, starts[(0, 1)], result="A"),
    ]
    calls = _calls(_project(spans))
    assert len(calls) == 2
    by_k = {c.arguments["k"]: c for _, c in calls}
    assert by_k[0].mcp["span_id"] == hex_id(61, 16)
    assert by_k[1].mcp["span_id"] == hex_id(60, 16)
    assert by_k[0].mcp["server"] == ""  # the client saw no server name


def test_mcp1_result_fills_a_call_the_model_never_saw_answered():
    run = agent_run(5, rounds=2, agent=False, per_call_traces=True, parallel=1)
    # Only round 0 arrived: its call has no result from a later round.
    spans = [
        s for s in _tool_spans_out(run) if s.attributes.get("gen_ai.usage.input_tokens") == 100
    ]
    start = _exec_starts(run)[(0, 0)]
    spans.append(_mcp1(700, 70, "tool_0", {"city": "Paris", "k": 0, "r": 0}, start, result="14C"))
    ((_, call),) = _calls(_project(spans))
    assert call.response == "14C"
    assert call.mcp is not None


def test_tool_error_is_the_calls_error():
    run = agent_run(6, rounds=2, agent=False, per_call_traces=True, parallel=1)
    spans = _tool_spans_out(run)
    start = _exec_starts(run)[(0, 0)]
    spans += _mcp2(800, 80, "tool_0", start, error=True)
    ((_, call),) = _calls(_project(spans))
    assert call.is_error
    assert call.mcp["error_type"] == "tool_error"


def test_an_exchange_that_matches_no_call_stays_raw():
    run = agent_run(7, rounds=2, agent=False, per_call_traces=True, parallel=1)
    spans = _tool_spans_out(run)
    start = _exec_starts(run)[(0, 0)]
    spans += _mcp2(900, 90, "other_tool", start)  # no call of that name
    spans += _mcp2(901, 92, "tool_0", T0 - 10**9)  # before any round
    calls = _calls(_project(spans))
    assert len(calls) == 1 and calls[0][1].mcp is None


def test_another_services_exchange_does_not_attach():
    run = agent_run(8, rounds=2, agent=False, per_call_traces=True, parallel=1)
    spans = _tool_spans_out(run)
    start = _exec_starts(run)[(0, 0)]
    other = _mcp2(950, 95, "tool_0", start)
    other[0] = dataclasses.replace(other[0], resource=dataclasses.replace(other[0].resource))
    other[0].resource.attributes["service.name"] = "another-agent"
    spans += other
    ((_, call),) = _calls(_project(spans))
    assert call.mcp is None


def test_mcp_links_meet_their_counterpart_only():
    run = agent_run(9, rounds=2, agent=False, per_call_traces=True, parallel=1)
    llm = normalize_span(run.spans[0])
    start = _exec_starts(run)[(0, 0)]
    client, server = (normalize_span(s) for s in _mcp2(990, 99, "tool_0", start))
    offers = {link for link in record_links(llm) if link.startswith(mcp.OFFER)}
    asks = {link for link in record_links(client) if link.startswith(mcp.ASK)}
    assert len(offers) == 2 and len(asks) == 1
    assert {mcp.counterpart(a) for a in asks} <= offers
    # Two model calls never meet through these links (their offers meet asks only), and the
    # server side asks nothing (it joins through its client's trace).
    assert not {mcp.counterpart(o) for o in offers} & offers
    assert not {link for link in record_links(server) if link.startswith(mcp.ASK)}
    assert mcp.lock_name(next(iter(asks))) in {mcp.lock_name(o) for o in offers}
    # Under a wrapper span the MCP span shares its model call's trace: it asks for nothing.
    wrapped, _ = (normalize_span(s) for s in _mcp2(990, 97, "tool_0", start, parent=5))
    assert not {link for link in record_links(wrapped) if link.startswith(mcp.ASK)}


def test_normalized_mcp_records():
    client, server = (normalize_span(s) for s in _mcp2(1, 2, "get_weather", T0))
    assert client["class"] == "other"
    assert client["mcp"] == {
        "method": "tools/call",
        "side": "client",
        "tool": "get_weather",
        "request_id": "1",
    }
    assert server["class"] == "tool" and server["mcp"]["side"] == "server"
    assert server["mcp"]["session_id"] == "sess-1"
    v1 = normalize_span(_mcp1(1, 3, "get_time", {"city": "Paris"}, T0))
    assert v1["mcp"] == {"method": "tools/call", "side": "client", "tool": "get_time"}
    assert v1["tool"]["name"] == "get_time"
    assert v1["tool"]["arguments"] == {"city": "Paris"}
    plain = normalize_span(make_span(1, 4, "get_time.tool", T0, T0 + 1, {}))
    assert "mcp" not in plain


@st.composite
def _scenario(draw):
    rounds = draw(st.integers(2, 4))
    parallel = draw(st.integers(1, 3))
    wrapped = draw(st.booleans())
    family = draw(st.sampled_from(["v2", "v1"]))
    run = agent_run(
        20, rounds=rounds, parallel=parallel, agent=wrapped, per_call_traces=not wrapped
    )
    spans = _tool_spans_out(run)
    agent_span = next((int(s.span_id, 16) for s in run.spans if s.name.startswith("invoke_")), None)
    for n, ((r, k), start) in enumerate(sorted(_exec_starts(run).items())):
        trace = 20 if wrapped else 3000 + n
        if family == "v2":
            spans += _mcp2(trace, 5000 + n * 2, f"tool_{k}", start, parent=agent_span, rid=n)
        else:
            args = {"city": "Paris", "k": k, "r": r}
            spans.append(_mcp1(trace, 5000 + n * 2, f"tool_{k}", args, start, parent=agent_span))
    return spans, (rounds - 1) * parallel


def _state(plans):
    return sorted(
        (t.key, r.index, c.sequence_index, c.function_name, json.dumps(c.mcp, sort_keys=True))
        for p in plans
        for t in p.turns
        for r in t.rounds
        for c in r.calls
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario(), st.randoms(use_true_random=False))
def test_every_call_is_the_models_each_with_its_exchange_whatever_the_order(scenario, rng):
    spans, expected = scenario
    plans = _project(spans)
    state = _state(plans)
    assert len(state) == expected
    assert all(row[-1] != "null" for row in state)
    shuffled = list(spans)
    random_module.Random(rng.random()).shuffle(shuffled)
    assert _state(_project(shuffled + shuffled[: len(shuffled) // 2])) == state
