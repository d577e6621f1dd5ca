"""The `otlp` bench section: GenAI spans with content, exported to `POST /v1/traces` by the
OpenTelemetry SDK's own OTLP/HTTP protobuf exporter, end to end through the server.

Each client process builds agent runs as the SDK's `ReadableSpan`s (an `invoke_agent` span, two
`chat` spans with `gen_ai.input/output.messages`, two `execute_tool` spans with arguments and
results: what pydantic-ai or the util-genai handler send) and hands batches of them to
`OTLPSpanExporter.export`, as a `BatchSpanProcessor` would (512 spans at most per export). Every
run has fresh trace and span ids, so every span is stored and projected.

A second load has the shape of an agent framework (LangGraph with OpenInference): per run an
AGENT span, CHAIN spans for the graph's nodes, two LLM spans with flattened
`llm.input_messages.*` / `llm.output_messages.*`, two TOOL spans without call ids (matched to
the model's calls by name and arguments), and an MCP client span `MCP send tools/call` under
one of them (docs/otlp-mapping.md, 'MCP calls').

The exporter is not a dependency of the server: `pip install 'toolscope[otlp-bench]'`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import random
import time
from pathlib import Path
from typing import Any

from .load import START_TIMEOUT_SECONDS, LoadResult, WorkerResult
from .sections import MAX_WARM_UP_SECONDS, BenchContext, Figure, _cpu_used, section
from .server import worker_cpu_seconds

RUNS_PER_EXPORT = 100  # 500 spans: a full SDK batch holds at most 512
SPANS_PER_RUN = 5
FRAMEWORK_SPANS_PER_RUN = 9
FRAMEWORK_RUNS_PER_EXPORT = 512 // FRAMEWORK_SPANS_PER_RUN  # 56 runs, 504 spans

_SYSTEM = {"role": "system", "parts": [{"type": "text", "content": "You answer from reports."}]}
_USER = {"role": "user", "parts": [{"type": "text", "content": "What was the revenue in Q3?"}]}
_RESULT = json.dumps(
    [
        {"source_number": n, "title": f"Quarterly report {n}", "snippet": "Revenue grew 12%."}
        for n in (1, 2)
    ]
)


def available() -> bool:
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _run_spans(run: int, now_ns: int, resource: Any, scope: Any) -> list[Any]:
    """One agent run (5 spans) with content, as the SDK hands them to an exporter."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    trace_id = random.getrandbits(128) | 1
    ids = [random.getrandbits(64) | 1 for _ in range(SPANS_PER_RUN)]
    agent_id = ids[0]
    calls = [
        # Unique like OpenAI's ids: a run is linked to no other.
        {
            "type": "tool_call",
            "id": f"call_{random.getrandbits(96):024x}",
            "name": name,
            "arguments": {"q": f"Q3 {run}.{k}"},
        }
        for k, name in enumerate(("search_reports", "fetch_page"))
    ]
    answer = {"role": "assistant", "parts": calls, "finish_reason": "tool_calls"}
    results = {
        "role": "tool",
        "parts": [
            {"type": "tool_call_response", "id": c["id"], "response": _RESULT} for c in calls
        ],
    }
    final = {
        "role": "assistant",
        "parts": [{"type": "text", "content": "Revenue grew 12% [source1]."}],
    }

    def span(index: int, name: str, start: int, end: int, attributes: dict, kind: Any) -> Any:
        context = SpanContext(trace_id, ids[index], is_remote=False, trace_flags=TraceFlags(1))
        parent = None
        if index:
            parent = SpanContext(trace_id, agent_id, is_remote=False, trace_flags=TraceFlags(1))
        return ReadableSpan(
            name=name,
            context=context,
            parent=parent,
            resource=resource,
            attributes=attributes,
            kind=kind,
            start_time=start,
            end_time=end,
            instrumentation_scope=scope,
        )

    def chat(index: int, start: int, inputs: list, output: dict, tokens: int) -> Any:
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
            "gen_ai.provider.name": "openai",
            "gen_ai.usage.input_tokens": tokens,
            "gen_ai.usage.output_tokens": 40,
            "gen_ai.response.finish_reasons": [output.get("finish_reason", "stop")],
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps([output]),
        }
        return span(
            index, "chat gpt-4o-mini", start, start + 400_000_000, attributes, SpanKind.CLIENT
        )

    def tool(index: int, call: dict, start: int) -> Any:
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call["name"],
            "gen_ai.tool.call.id": call["id"],
            "gen_ai.tool.call.arguments": json.dumps(call["arguments"]),
            "gen_ai.tool.call.result": _RESULT,
        }
        return span(
            index,
            f"execute_tool {call['name']}",
            start,
            start + 50_000_000,
            attributes,
            SpanKind.INTERNAL,
        )

    t = now_ns
    agent = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "bench_agent",
        "gen_ai.conversation.id": f"bench-conv-{trace_id:032x}",
    }
    return [
        span(0, "invoke_agent bench_agent", t, t + 1_000_000_000, agent, SpanKind.INTERNAL),
        chat(1, t + 1_000, [_SYSTEM, _USER], answer, 900),
        tool(2, calls[0], t + 401_000_000),
        tool(3, calls[1], t + 402_000_000),
        chat(4, t + 460_000_000, [_SYSTEM, _USER, answer, results], final, 1400),
    ]


def _flattened(prefix: str, messages: list[dict]) -> dict[str, Any]:
    """OpenInference's flattened messages (`llm.input_messages.<i>.message.*`)."""
    out: dict[str, Any] = {}
    for i, message in enumerate(messages):
        base = f"{prefix}.{i}.message"
        out[f"{base}.role"] = message["role"]
        if message.get("content") is not None:
            out[f"{base}.content"] = message["content"]
        if message.get("tool_call_id"):
            out[f"{base}.tool_call_id"] = message["tool_call_id"]
        for j, call in enumerate(message.get("tool_calls") or ()):
            out[f"{base}.tool_calls.{j}.tool_call.id"] = call["id"]
            out[f"{base}.tool_calls.{j}.tool_call.function.name"] = call["name"]
            out[f"{base}.tool_calls.{j}.tool_call.function.arguments"] = call["arguments"]
    return out


def _framework_run_spans(run: int, now_ns: int, resource: Any, scope: Any) -> list[Any]:
    """One LangGraph-like run (9 spans): graph AGENT, node CHAINs, two LLM calls, two TOOL
    spans without ids, and the MCP client span of one of them."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    trace_id = random.getrandbits(128) | 1
    ids = [random.getrandbits(64) | 1 for _ in range(FRAMEWORK_SPANS_PER_RUN)]
    calls = [
        {
            "id": f"call_{random.getrandbits(96):024x}",
            "name": name,
            "arguments": json.dumps({"q": f"Q3 {run}.{k}"}),
        }
        for k, name in enumerate(("search_reports", "fetch_page"))
    ]
    system = {"role": "system", "content": "You answer from reports."}
    user = {"role": "user", "content": "What was the revenue in Q3?"}
    asked = {"role": "assistant", "tool_calls": calls}
    results = [{"role": "tool", "tool_call_id": c["id"], "content": _RESULT} for c in calls]
    final = {"role": "assistant", "content": "Revenue grew 12% [source1]."}

    def span(
        index: int,
        parent: int | None,
        name: str,
        start: int,
        end: int,
        attrs: dict,
        kind: Any = SpanKind.INTERNAL,
    ) -> Any:
        def context(i: int) -> Any:
            return SpanContext(trace_id, ids[i], is_remote=False, trace_flags=TraceFlags(1))

        return ReadableSpan(
            name=name,
            context=context(index),
            parent=context(parent) if parent is not None else None,
            resource=resource,
            attributes=attrs,
            kind=kind,
            start_time=start,
            end_time=end,
            instrumentation_scope=scope,
        )

    def llm(index: int, parent: int, start: int, inputs: list, output: dict, tokens: int) -> Any:
        attrs = {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.provider": "openai",
            "llm.token_count.prompt": tokens,
            "llm.token_count.completion": 40,
            "session.id": session,
            **_flattened("llm.input_messages", inputs),
            **_flattened("llm.output_messages", [output]),
        }
        return span(index, parent, "ChatOpenAI", start, start + 400_000_000, attrs)

    def tool(index: int, call: dict, start: int) -> Any:
        attrs = {
            "openinference.span.kind": "TOOL",
            "tool.name": call["name"],
            "input.value": call["arguments"],
            "output.value": _RESULT,
        }
        return span(index, 3, call["name"], start, start + 50_000_000, attrs)

    session = f"bench-graph-{trace_id:032x}"
    t = now_ns
    chain = {"openinference.span.kind": "CHAIN", "metadata": '{"langgraph_node": "agent"}'}
    mcp = {"mcp.method.name": "tools/call", "jsonrpc.request.id": str(run)}
    return [
        span(0, None, "LangGraph", t, t + 1_000_000_000, {"openinference.span.kind": "AGENT"}),
        span(1, 0, "agent", t + 500, t + 400_500_000, chain),
        llm(2, 1, t + 1_000, [system, user], asked, 900),
        span(3, 0, "tools", t + 401_000_000, t + 455_000_000, {"openinference.span.kind": "CHAIN"}),
        tool(4, calls[0], t + 401_000_000),
        tool(5, calls[1], t + 402_000_000),
        span(
            6,
            5,
            "MCP send tools/call fetch_page",
            t + 402_100_000,
            t + 451_000_000,
            mcp,
            SpanKind.CLIENT,
        ),
        span(7, 0, "agent", t + 459_000_000, t + 861_000_000, chain),
        llm(8, 7, t + 460_000_000, [system, user, asked, *results], final, 1400),
    ]


SHAPES = {
    "semconv": (_run_spans, RUNS_PER_EXPORT),
    "framework": (_framework_run_spans, FRAMEWORK_RUNS_PER_EXPORT),
}


def _client(
    base_url: str,
    key: str,
    seconds: float,
    warm_up: float,
    service: str,
    start: Any,
    out: Any,
    shape: str = "semconv",
) -> None:
    """One client process: export batches for `seconds` after `warm_up`, report the counts."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SpanExportResult
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    random.seed(os.getpid() ^ time.time_ns())
    exporter = OTLPSpanExporter(
        endpoint=f"{base_url}/v1/traces", headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    resource = Resource.create({"service.name": service})
    scope = InstrumentationScope("toolscope.bench", "1")
    result = WorkerResult()  # calls: spans, requests: exports
    run = 0

    make, runs_per_export = SHAPES[shape]

    def batch() -> list[Any]:
        nonlocal run
        spans = []
        for _ in range(runs_per_export):
            run += 1
            spans += make(run, time.time_ns(), resource, scope)
        return spans

    start.wait(START_TIMEOUT_SECONDS)
    deadline_warm = time.monotonic() + warm_up
    while time.monotonic() < deadline_warm:
        exporter.export(batch())
    cpu_before = time.process_time()
    result.started = time.monotonic()
    deadline = result.started + seconds
    while time.monotonic() < deadline:
        spans = batch()
        sent = time.monotonic()
        outcome = exporter.export(spans)
        result.latencies.append(time.monotonic() - sent)
        if outcome == SpanExportResult.SUCCESS:
            result.calls += len(spans)
            result.requests += 1
        else:
            result.errors += 1
            if len(result.error_samples) < 3:
                result.error_samples.append(f"export failed ({outcome})")
    result.ended = time.monotonic()
    result.cpu_seconds = time.process_time() - cpu_before
    exporter.shutdown()
    out.put(result)


def _run_clients(
    ctx: BenchContext, processes: int, service: str, shape: str = "semconv"
) -> list[WorkerResult]:
    assert ctx.server is not None
    mp = multiprocessing.get_context("spawn")
    start, out = mp.Event(), mp.Queue()
    warm_up = min(MAX_WARM_UP_SECONDS, ctx.seconds / 4)
    workers = [
        mp.Process(
            target=_client,
            args=(
                ctx.server.base_url,
                ctx.server.key,
                ctx.seconds,
                warm_up,
                service,
                start,
                out,
                shape,
            ),
            daemon=True,
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    start.set()
    results = []
    deadline = time.monotonic() + ctx.seconds + START_TIMEOUT_SECONDS + 60
    while len(results) < processes and time.monotonic() < deadline:
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            if not any(w.is_alive() for w in workers):
                break
    for worker in workers:
        worker.join(timeout=5)
        if worker.is_alive():
            worker.terminate()
    if len(results) < processes:
        raise RuntimeError("an OTLP bench client did not report back")
    return results


def _token_pass_cpu(before: dict[int, float], master_pid: int | None) -> float:
    """CPU seconds the token pass process spent since `before`: part of the server's CPU (it
    counts the stored calls' tokens, mostly those of the load before, 30 s behind)."""
    from ..token_process import MODULE

    if not master_pid:
        return 0.0
    spent = 0.0
    for pid, seconds in worker_cpu_seconds(master_pid).items():
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone
        if pid != master_pid and MODULE.encode() in command:
            spent += seconds - before.get(pid, 0.0)
    return spent


def _stored_spans(database_url: str | None, service: str) -> int | None:
    if database_url is None:
        return None
    import sqlalchemy as sa

    from ..models import OtelSpan

    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.select(sa.func.count()).where(OtelSpan.service_name == service)
            ).scalar_one()
    finally:
        engine.dispose()


@section(
    "otlp",
    "GenAI spans with content exported by the OpenTelemetry SDK's OTLP/HTTP protobuf exporter",
    needs_server=True,
)
def otlp_section(ctx: BenchContext) -> list[Figure]:
    if not available():
        ctx.say("  otlp: skipped (pip install 'toolscope[otlp-bench]' for the SDK exporter)")
        return []
    figures = [_measure(ctx, "semconv")]
    figures.append(_measure(ctx, "framework"))
    return figures


def _measure(ctx: BenchContext, shape: str) -> Figure:
    """One load of the section: `semconv` (agent runs in the GenAI conventions) or `framework`
    (LangGraph-like runs, id-less tool spans and an MCP span)."""
    assert ctx.server is not None
    processes = ctx.load.processes if ctx.load is not None else 2
    name = "otlp" if shape == "semconv" else "otlp-framework"
    service = f"{ctx.run_id}-{name}"
    label = "POST /v1/traces (OTLP protobuf, SDK exporter)"
    if shape == "framework":
        label += ", LangGraph-like runs with an MCP span"
    ctx.say(f"  {label} ...")
    cpu_before = worker_cpu_seconds(ctx.server.pid) if ctx.server.pid else {}
    run = LoadResult.merge(name, _run_clients(ctx, processes, service, shape))
    server_cpu = _cpu_used(cpu_before, ctx.server.pid)
    wall, spans, exports, errors = run.wall_seconds, run.calls, run.requests, run.errors
    client_cpu = run.client_cpu_share
    values: dict[str, Any] = {
        "spans_per_second": round(spans / wall, 1) if wall else 0.0,
        "exports_per_second": round(exports / wall, 2) if wall else 0.0,
        "spans_per_export": (
            RUNS_PER_EXPORT * SPANS_PER_RUN
            if shape == "semconv"
            else FRAMEWORK_RUNS_PER_EXPORT * FRAMEWORK_SPANS_PER_RUN
        ),
        "p50_ms": round(run.percentile_ms(50), 1),
        "p95_ms": round(run.percentile_ms(95), 1),
        "spans": spans,
        "errors": errors,
        "error_samples": run.error_samples,
        "seconds": round(wall, 2),
        "client_processes": processes,
        "client_cpu_per_process": round(client_cpu, 3),
    }
    text = (
        f"{values['spans_per_second']:>9,.0f} spans/s"
        f" {values['exports_per_second']:>6,.2f} exports/s"
        f"   p50 {values['p50_ms']:.0f} ms  p95 {values['p95_ms']:.0f} ms   errors {errors}"
        f"   ({spans:,} spans in {wall:.1f} s; client CPU {client_cpu:.0%} of a core per process)"
    )
    if server_cpu:
        values["server_cores_busy"] = round(sum(server_cpu) / wall, 2)
        values["spans_per_server_cpu_second"] = round(spans / sum(server_cpu), 1)
        token_cpu = _token_pass_cpu(cpu_before, ctx.server.pid)
        values["token_pass_cpu_share"] = round(token_cpu / sum(server_cpu), 3)
        text += (
            f"   server: {values['server_cores_busy']:.2f} cores busy,"
            f" {values['spans_per_server_cpu_second']:,.0f} spans per CPU-second"
            f" ({values['token_pass_cpu_share']:.0%} of it the token pass)"
        )
    stored = _stored_spans(ctx.server_database_url, service)
    if stored is not None:
        values["stored_spans"] = stored
        if stored < spans:
            text += f"   STORED {stored:,} < SENT {spans:,}"
    for sample in values["error_samples"]:
        ctx.say(f"    error: {sample}")
    return Figure("otlp", ctx.target, label, values, text)
