"""Builders of OTLP data for the tests: spans and log records shaped like the real producers'
(docs/otlp.md), and their encodings as OTLP/JSON and protobuf request bodies.

`agent_run(...)` makes one agent run (system + user prompt → N rounds of parallel tool calls →
final text) in the span shapes of the producers (docs/otlp-mapping.md, 'Producers'), as
`records.Span` values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from webapp.ingest.otlp.records import LogRecord, Resource, Span

SYSTEM = "You are a helpful weather assistant."
PROMPT = "What is the weather and the time in Paris?"
FINAL = "Sunny and 14:05."
T0 = 1_760_000_000_000_000_000  # ns


def hex_id(n: int, width: int) -> str:
    return f"{n:0{width}x}"


def make_span(
    trace: int,
    span: int,
    name: str,
    start: int,
    end: int,
    attributes: dict[str, Any],
    parent: int | None = None,
    status: int = 0,
    service: str = "agent",
    kind: int = 1,
    events: list[dict[str, Any]] | None = None,
) -> Span:
    return Span(
        trace_id=hex_id(trace, 32),
        span_id=hex_id(span, 16),
        parent_span_id=hex_id(parent, 16) if parent else "",
        name=name,
        kind=kind,
        start_ns=start,
        end_ns=end,
        status_code=status,
        status_message="",
        attributes=attributes,
        events=events or [],
        links=[],
        scope_name="tests",
        scope_version="1",
        resource=Resource({"service.name": service}),
    )


def make_log(
    trace: int, span: int, event: str, time_ns: int, body: Any = None, attributes: Any = None
) -> LogRecord:
    return LogRecord(
        trace_id=hex_id(trace, 32),
        span_id=hex_id(span, 16),
        event_name=event,
        time_ns=time_ns,
        observed_ns=time_ns,
        severity_number=9,
        body=body,
        attributes=attributes or {},
        scope_name="tests",
        scope_version="1",
        resource=Resource({"service.name": "agent"}),
    )


# --- Semconv message builders -----------------------------------------------------------------


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def calls_message(calls: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": i, "name": n, "arguments": a} for i, n, a in calls],
    }


def results_message(results: list[tuple[str, str]], role: str = "tool") -> dict[str, Any]:
    return {
        "role": role,
        "parts": [{"type": "tool_call_response", "id": i, "response": r} for i, r in results],
    }


@dataclass
class Run:
    """One agent run's spans and logs, and what the projection should make of it."""

    spans: list[Span]
    logs: list[LogRecord]
    trace: int
    rounds: list[list[tuple[str, str, dict[str, Any], str]]]  # per round: (id, name, args, result)


def agent_run(
    trace: int,
    rounds: int = 2,
    parallel: int = 2,
    *,
    agent: bool = True,
    content: bool = True,
    ids: bool = True,
    conversation: str | None = None,
    per_call_traces: bool = False,
    tool_spans: bool = True,
    overlap: bool = True,
    start: int = T0,
    service: str = "agent",
    prompt: str = PROMPT,
) -> Run:
    """An agent run: `rounds` LLM rounds, each but the last asking for `parallel` tool calls.

    `per_call_traces`: each LLM span is the root of its own trace (bare instrumentations).
    `overlap`: the tool spans of a round run in parallel, started in reverse order.
    """
    spans: list[Span] = []
    agent_id = trace * 1000 + 1
    t = start + 1_000
    history: list[dict[str, Any]] = [text("system", SYSTEM), text("user", prompt)]
    plan: list[list[tuple[str, str, dict[str, Any], str]]] = []
    for r in range(rounds):
        last = r == rounds - 1
        calls = (
            []
            if last
            else [
                (
                    f"call_{trace}_{r}_{k}" if ids else "",
                    f"tool_{k}",
                    {"city": "Paris", "k": k, "r": r},
                    f"result {trace}/{r}/{k}",
                )
                for k in range(parallel)
            ]
        )
        llm_trace = trace * 100 + r if per_call_traces else trace
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.provider.name": "openai",
            "gen_ai.usage.input_tokens": 100 + r,
            "gen_ai.usage.output_tokens": 10 + r,
            "gen_ai.response.finish_reasons": ["stop"] if last else ["tool_calls"],
        }
        if conversation and not agent:
            attrs["gen_ai.conversation.id"] = conversation
        output = text("assistant", FINAL) if last else calls_message([c[:3] for c in calls])
        if content:
            attrs["gen_ai.input.messages"] = json.dumps(history)
            attrs["gen_ai.output.messages"] = json.dumps([output])
        llm_start, llm_end = t, t + 50_000
        spans.append(
            make_span(
                llm_trace,
                trace * 1000 + 10 + r,
                "chat gpt-4o-mini",
                llm_start,
                llm_end,
                attrs,
                parent=None if per_call_traces else (agent_id if agent else trace * 1000 + 2),
                kind=3,
                service=service,
            )
        )
        t = llm_end + 1_000
        if calls and tool_spans:
            for k, (call_id, name, args, result) in enumerate(calls):
                # Parallel tools: the later call starts first when `overlap` is on.
                offset = (len(calls) - 1 - k) if overlap else k
                tool_attrs = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": name,
                    "gen_ai.tool.call.id": call_id,
                }
                if content:
                    tool_attrs["gen_ai.tool.call.arguments"] = json.dumps(args)
                    tool_attrs["gen_ai.tool.call.result"] = result
                spans.append(
                    make_span(
                        llm_trace,
                        trace * 1000 + 100 + r * 10 + k,
                        f"execute_tool {name}",
                        t + offset * 100,
                        t + 5_000 + offset * 100,
                        tool_attrs,
                        parent=None
                        if per_call_traces
                        else (agent_id if agent else trace * 1000 + 2),
                        service=service,
                    )
                )
            t += 10_000
        history = [*history, output]
        if calls:
            history.append(results_message([(c[0], c[3]) for c in calls]))
        plan.append(calls)
    if agent:
        agent_attrs: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "weather_agent",
            "gen_ai.usage.input_tokens": 999,
        }
        if conversation:
            agent_attrs["gen_ai.conversation.id"] = conversation
        spans.append(
            make_span(
                trace,
                agent_id,
                "invoke_agent weather_agent",
                start,
                t + 1_000,
                agent_attrs,
                service=service,
            )
        )
    return Run(spans, [], trace, plan)


# --- Encodings --------------------------------------------------------------------------------


def _any_value_json(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any_value_json(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": _attributes_json(value)}}
    raise TypeError(type(value))


def _attributes_json(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any_value_json(v)} for k, v in attributes.items()]


def _span_json(span: Span) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": span.trace_id,
        "spanId": span.span_id,
        "name": span.name,
        "kind": span.kind,
        "startTimeUnixNano": str(span.start_ns),
        "endTimeUnixNano": str(span.end_ns),
        "attributes": _attributes_json(span.attributes),
        "status": {"code": span.status_code, "message": span.status_message},
        "events": [
            {
                "name": e["name"],
                "timeUnixNano": str(e["time_ns"]),
                "attributes": _attributes_json(e["attributes"]),
            }
            for e in span.events
        ],
    }
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id
    if span.links:
        out["links"] = [
            {
                "traceId": link["trace_id"],
                "spanId": link["span_id"],
                "attributes": _attributes_json(link["attributes"]),
            }
            for link in span.links
        ]
    return out


def _grouped(spans: list[Span]) -> dict[str, dict[tuple[str, str], list[Span]]]:
    """Spans by service, then by instrumentation scope, in their order."""
    out: dict[str, dict[tuple[str, str], list[Span]]] = {}
    for span in spans:
        scopes = out.setdefault(span.resource.service_name, {})
        scopes.setdefault((span.scope_name, span.scope_version), []).append(span)
    return out


def _resource(scopes: dict[tuple[str, str], list[Span]]) -> dict[str, Any]:
    """A service's resource attributes: its first span's (service.name and any others)."""
    return next(iter(scopes.values()))[0].resource.attributes


def _log_resource(logs: list[LogRecord]) -> dict[str, Any]:
    return logs[0].resource.attributes if logs else {"service.name": "agent"}


def traces_json(spans: list[Span]) -> bytes:
    """An OTLP/JSON ExportTraceServiceRequest: one resource per service, one scope each."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": _attributes_json(_resource(scopes))},
                    "scopeSpans": [
                        {
                            "scope": {"name": name, "version": version},
                            "spans": [_span_json(s) for s in group],
                        }
                        for (name, version), group in scopes.items()
                    ],
                }
                for scopes in _grouped(spans).values()
            ]
        }
    ).encode()


def logs_json(logs: list[LogRecord]) -> bytes:
    return json.dumps(
        {
            "resourceLogs": [
                {
                    "resource": {"attributes": _attributes_json(_log_resource(logs))},
                    "scopeLogs": [
                        {
                            "scope": {"name": "tests"},
                            "logRecords": [
                                {
                                    "traceId": r.trace_id,
                                    "spanId": r.span_id,
                                    "eventName": r.event_name,
                                    "timeUnixNano": str(r.time_ns),
                                    "observedTimeUnixNano": str(r.observed_ns),
                                    "body": _any_value_json(r.body),
                                    "attributes": _attributes_json(r.attributes),
                                }
                                for r in logs
                            ],
                        }
                    ],
                }
            ]
        }
    ).encode()


def _any_value_pb(target: AnyValue, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, list):
        target.array_value.SetInParent()
        for item in value:
            _any_value_pb(target.array_value.values.add(), item)
    elif isinstance(value, dict):
        target.kvlist_value.SetInParent()
        for key, item in value.items():
            kv = target.kvlist_value.values.add()
            kv.key = key
            _any_value_pb(kv.value, item)


def _attributes_pb(target: Any, attributes: dict[str, Any]) -> None:
    for key, value in attributes.items():
        kv: KeyValue = target.add()
        kv.key = key
        _any_value_pb(kv.value, value)


def traces_protobuf(spans: list[Span]) -> bytes:
    request = ExportTraceServiceRequest()
    for scopes in _grouped(spans).values():
        resource_spans = request.resource_spans.add()
        _attributes_pb(resource_spans.resource.attributes, _resource(scopes))
        for (name, version), group in scopes.items():
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name, scope_spans.scope.version = name, version
            _add_spans(scope_spans, group)
    return request.SerializeToString()


def _add_spans(scope_spans: Any, group: list[Span]) -> None:
    for span in group:
        out = scope_spans.spans.add()
        out.trace_id = bytes.fromhex(span.trace_id)
        out.span_id = bytes.fromhex(span.span_id)
        if span.parent_span_id:
            out.parent_span_id = bytes.fromhex(span.parent_span_id)
        out.name, out.kind = span.name, span.kind
        out.start_time_unix_nano, out.end_time_unix_nano = span.start_ns, span.end_ns
        out.status.code, out.status.message = span.status_code, span.status_message
        _attributes_pb(out.attributes, span.attributes)
        for event in span.events:
            e = out.events.add()
            e.name, e.time_unix_nano = event["name"], event["time_ns"]
            _attributes_pb(e.attributes, event["attributes"])
        for link in span.links:
            added = out.links.add()
            added.trace_id = bytes.fromhex(link["trace_id"])
            added.span_id = bytes.fromhex(link["span_id"])
            _attributes_pb(added.attributes, link["attributes"])


def logs_protobuf(logs: list[LogRecord]) -> bytes:
    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    _attributes_pb(resource_logs.resource.attributes, _log_resource(logs))
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name = "tests"
    for record in logs:
        out = scope_logs.log_records.add()
        out.trace_id = bytes.fromhex(record.trace_id) if record.trace_id else b""
        out.span_id = bytes.fromhex(record.span_id) if record.span_id else b""
        out.event_name = record.event_name
        out.time_unix_nano, out.observed_time_unix_nano = record.time_ns, record.observed_ns
        _any_value_pb(out.body, record.body)
        _attributes_pb(out.attributes, record.attributes)
    return request.SerializeToString()
