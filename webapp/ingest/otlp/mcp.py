"""MCP calls: an MCP `tools/call` span is the transport of a call the model made, never a call
of its own (docs/otlp-mapping.md, 'MCP calls').

Pure rules, no Flask, database or clock, in three parts:

1. `mcp_record`: what a span says about MCP, read at normalization into the record's `mcp` key:
   mcp 2.x's native spans (`mcp.method.name`; client `MCP send tools/call <name>`, server
   `tools/call <name>`) and OpenLLMetry's opentelemetry-instrumentation-mcp on mcp 1.x
   (`<name>.tool`, `traceloop.span.kind=tool`, `traceloop.entity.name`).
2. `mcp_links`: the links that put an MCP span in its own trace into the component of the model
   call it executed: the model call offers `(service, tool, minute)` keys for its calls, the MCP
   client span asks for one (docs/otlp-mapping.md, 'Links between traces').
3. `exchanges` and `attach`: the client and server spans of one request make one exchange, and
   each exchange enriches the model's call it executed (under that call's execution span, else
   by name and canonical arguments within the round's window), once the projection has planned
   the turns.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import messages as m

Record = dict[str, Any]

TOOLS_CALL = "tools/call"
SPAN_KIND_SERVER = 2
SPAN_KIND_CLIENT = 3
# OpenLLMetry's instrumentation scope (mcp 1.x): its tool spans are MCP calls.
TRACELOOP_SCOPE = "opentelemetry.instrumentation.mcp"
# The window of the cross-trace link: an MCP span in its own trace that starts within a minute
# (at most two) of its model call's end joins that call's component.
LINK_BUCKET_NS = 60 * 1_000_000_000
# Link prefixes: a model call offers ("mc"), an MCP client span asks ("ms"); the component
# follows a link from one kind to the other only, never between two model calls.
OFFER, ASK = "mc", "ms"
MAX_TEXT = 255


def _text(value: Any, limit: int = MAX_TEXT) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str) or not value:
        return None
    return value[:limit]


# --- 1. The record ------------------------------------------------------------------------------


def mcp_record(
    name: str, kind: int, attrs: Mapping[str, Any], scope: str, service: str
) -> Record | None:
    """What a span says about MCP, or None when it is not an MCP span."""
    method = _text(attrs.get("mcp.method.name"), 64)
    if method is not None:
        if kind == SPAN_KIND_SERVER:
            side = "server"
        elif kind == SPAN_KIND_CLIENT or name.startswith("MCP send "):
            side = "client"
        else:
            side = "server"
        tool = _text(attrs.get("gen_ai.tool.name"))
        if tool is None and method == TOOLS_CALL:
            target = name.removeprefix("MCP send ").removeprefix(method).strip()
            tool = target[:MAX_TEXT] or None
        server = _text(attrs.get("mcp.server.name"))
    elif scope.startswith(TRACELOOP_SCOPE) and attrs.get("traceloop.span.kind") == "tool":
        method = TOOLS_CALL
        tool = _text(attrs.get("traceloop.entity.name")) or _text(name.removesuffix(".tool"))
        workflow = _text(attrs.get("traceloop.workflow.name"))
        # FastMCP's server side names its server `<name>.mcp` in the workflow name.
        side = "server" if workflow and workflow.endswith(".mcp") else "client"
        server = workflow.removesuffix(".mcp") if side == "server" and workflow else None
    else:
        return None
    address = _text(attrs.get("server.address"))
    port = _text(attrs.get("server.port"))
    out: Record = {
        "method": method,
        "side": side,
        "tool": tool,
        "server": server or (f"{address}:{port}" if address and port else address),
        "request_id": _text(attrs.get("jsonrpc.request.id")) or _text(attrs.get("mcp.request.id")),
        "session_id": _text(attrs.get("mcp.session.id")),
        "protocol_version": _text(attrs.get("mcp.protocol.version"), 32),
        "transport": _text(attrs.get("network.transport"), 32)
        or _text(attrs.get("mcp.transport"), 32),
        "error_type": _text(attrs.get("error.type"), 64),
    }
    return {k: v for k, v in out.items() if v is not None}


# --- 2. Links -----------------------------------------------------------------------------------


def _link(prefix: str, service: str, tool: str, bucket: int) -> str:
    value = f"mcp\x00{service}\x00{tool}\x00{bucket}"
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return prefix + digest[len(prefix) :]


def counterpart(link: str) -> str:
    """The link an MCP link meets: an offer meets asks and an ask offers; others meet
    themselves."""
    if link.startswith(OFFER):
        return ASK + link[len(ASK) :]
    if link.startswith(ASK):
        return OFFER + link[len(OFFER) :]
    return link


def lock_name(link: str) -> str:
    """One name for an offer and the asks it meets, so that their writers serialize."""
    return "m" + link[2:] if link.startswith((OFFER, ASK)) else link


def mcp_links(record: Record) -> set[str]:
    """A model call offers a link per called tool and minute (the minute of its end and the
    next); an MCP client span of `tools/call` that is the root of its trace (no wrapper span
    puts it in the model call's trace) asks for the one of its start. Both carry the service,
    since the MCP client runs in the agent that called the model."""
    links: set[str] = set()
    service = record.get("service") or ""
    if record.get("class") == "llm":
        output = record.get("output") or record.get("output_fallback")
        if output:
            bucket = record["end_ns"] // LINK_BUCKET_NS
            for call in m.tool_calls(output[0]):
                if call["name"]:
                    links.add(_link(OFFER, service, call["name"], bucket))
                    links.add(_link(OFFER, service, call["name"], bucket + 1))
    info = record.get("mcp")
    if (
        info
        and info.get("side") == "client"
        and info.get("method") == TOOLS_CALL
        and info.get("tool")
        and not record.get("parent_span_id")  # the root of its own trace: no wrapper span
    ):
        links.add(_link(ASK, service, info["tool"], record["start_ns"] // LINK_BUCKET_NS))
    return links


# --- 3. Exchanges and their calls ---------------------------------------------------------------


def _canon(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _unwrap_result(text: str | None) -> str | None:
    """OpenLLMetry's `traceloop.entity.output` is `{"result": "..."}`: the text inside."""
    if text is None or not text.startswith("{"):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and isinstance(value.get("result"), str):
        return value["result"]
    return text


def exchanges(spans: Iterable[Record]) -> list[Record]:
    """The `tools/call` exchanges of the records: a client span with the server span under it
    (context travels in `_meta`), or with the same session and JSON-RPC id; a span with no
    partner is an exchange alone. In (start, span id) order."""
    calls = sorted(
        (
            r
            for r in spans
            if r.get("mcp") and r["mcp"].get("method") == TOOLS_CALL and r["mcp"].get("tool")
        ),
        key=lambda r: (r["start_ns"], r["span_id"], r["trace_id"]),
    )
    clients = {(r["trace_id"], r["span_id"]): r for r in calls if r["mcp"]["side"] == "client"}
    by_request = {
        (r["mcp"]["session_id"], r["mcp"]["request_id"]): r
        for r in reversed(list(clients.values()))
        if r["mcp"].get("session_id") and r["mcp"].get("request_id")
    }
    paired: dict[tuple[str, str], Record] = {}
    alone: list[Record] = []
    for record in calls:
        if record["mcp"]["side"] != "server":
            continue
        client = clients.get((record["trace_id"], record.get("parent_span_id") or ""))
        if client is None:
            info = record["mcp"]
            client = by_request.get((info.get("session_id"), info.get("request_id")))
        key = (client["trace_id"], client["span_id"]) if client is not None else None
        if key is None or key in paired or client["mcp"]["tool"] != record["mcp"]["tool"]:
            alone.append(record)
        else:
            paired[key] = record
    out = [_exchange(client, paired.get(key)) for key, client in clients.items()]
    out += [_exchange(None, server) for server in alone]
    out.sort(key=lambda e: (e["start_ns"], e["span_id"], e["trace_id"]))
    return out


def _exchange(client: Record | None, server: Record | None) -> Record:
    first = client if client is not None else server
    assert first is not None
    info: Record = {}
    for record in (server, client):  # the client's values win where both say
        if record is not None:
            info.update(record["mcp"])
    tool = (client or {}).get("tool") or (server or {}).get("tool") or {}
    status_error = any(r is not None and r["status"] == 2 for r in (client, server))
    server_name = (
        (server or {}).get("mcp", {}).get("server")
        or (server["service"] if server is not None else None)
        or (client or {}).get("mcp", {}).get("server")
    )
    details: Record = {
        "server": _text(server_name) or "",
        "method": info.get("method", TOOLS_CALL),
        "transport": info.get("transport"),
        "session_id": info.get("session_id"),
        "request_id": info.get("request_id"),
        "protocol_version": info.get("protocol_version"),
        "duration_ms": _ms(first),
        "server_duration_ms": _ms(server) if client is not None and server is not None else None,
        "error_type": info.get("error_type"),
        "trace_id": first["trace_id"],
        "span_id": first["span_id"],
    }
    if details["error_type"] is None and status_error:
        details["error_type"] = "error"
    error_text = next(
        (r["status_message"] for r in (server, client) if r is not None and r["status_message"]),
        None,
    )
    return {
        "trace_id": first["trace_id"],
        "span_id": first["span_id"],
        "span_ids": [r["span_id"] for r in (client, server) if r is not None],
        "tool": first["mcp"]["tool"],
        "start_ns": first["start_ns"],
        "end_ns": first["end_ns"],
        # The agent's service: known when the client span is (the server runs elsewhere).
        "service": client["service"] if client is not None else None,
        "arguments": tool.get("arguments"),
        "result": _unwrap_result(m.result_of(tool.get("result"))),
        "error_text": error_text,
        "redactions": list(tool.get("redactions") or []),
        "anchor": first,
        "details": details,
    }


def _ms(record: Record | None) -> float | None:
    if record is None or not record["end_ns"]:
        return None
    return round(max(record["end_ns"] - record["start_ns"], 0) / 1_000_000, 3)


def attach(
    turns: Sequence[Any], found: Sequence[Record], ancestors: Callable[[Record], list[Record]]
) -> None:
    """Each exchange enriches one call of the turns' plans, and each call takes one exchange:
    the call whose execution span holds the exchange, else a call of the same tool whose round
    window (the model call's end to the next model call's start) holds the exchange's start,
    in the agent's service, with equal canonical arguments when both are known; the same trace
    first, then the nearest round before it. An exchange that matches no call stays raw."""
    if not found:
        return
    candidates: list[tuple[Any, Any, Any, int, int | None]] = []
    by_span: dict[tuple[str, str], tuple[Any, Any]] = {}
    for turn in turns:
        real = [r for r in turn.rounds if r.usage is not None]
        for i, plan in enumerate(real):
            low = plan.usage.ended_ns or plan.usage.created_ns
            high = real[i + 1].usage.created_ns if i + 1 < len(real) else None
            for call in plan.calls:
                candidates.append((turn, plan, call, low, high))
        for plan in turn.rounds:
            for call in plan.calls:
                if call.span_id:
                    for trace_id in turn.traces:
                        by_span[(trace_id, call.span_id)] = (turn, call)
    taken: set[int] = set()
    for exchange in found:
        match = None
        for parent in ancestors(exchange["anchor"]):
            hit = by_span.get((parent["trace_id"], parent["span_id"]))
            if hit is not None and id(hit[1]) not in taken:
                match = hit
                break
        if match is None:
            match = _by_window(exchange, candidates, taken)
        if match is None:
            continue
        turn, call = match
        taken.add(id(call))
        _enrich(turn, call, exchange)


def _by_window(
    exchange: Record, candidates: list[tuple[Any, Any, Any, int, int | None]], taken: set[int]
) -> tuple[Any, Any] | None:
    best = None
    best_key: tuple[Any, ...] | None = None
    start = exchange["start_ns"]
    for turn, plan, call, low, high in candidates:
        if id(call) in taken or call.function_name != exchange["tool"]:
            continue
        if not (low <= start and (high is None or start < high)):
            continue
        if exchange["service"] is not None and exchange["service"] != turn.service:
            continue
        if (
            call.arguments is not None
            and exchange["arguments"] is not None
            and _canon(call.arguments) != _canon(exchange["arguments"])
        ):
            continue
        key = (plan.trace_id != exchange["trace_id"], -low, turn.key, call.sequence_index)
        if best_key is None or key < best_key:
            best, best_key = (turn, call), key
    return best


def _enrich(turn: Any, call: Any, exchange: Record) -> None:
    details = exchange["details"]
    call.mcp = details
    if call.started_ns is None:
        call.started_ns, call.ended_ns = exchange["start_ns"], exchange["end_ns"]
    if call.arguments is None and exchange["arguments"] is not None:
        call.arguments = exchange["arguments"]
    if call.response is None and exchange["result"] is not None:
        call.response, call.response_ns = exchange["result"], exchange["end_ns"]
    if details.get("error_type"):
        call.is_error = True
        if call.response is None and exchange["error_text"]:
            call.response, call.response_ns = exchange["error_text"], exchange["end_ns"]
    for name in exchange["redactions"]:
        if name not in call.redactions:
            call.redactions.append(name)
    captured = call.response is not None or call.arguments is not None
    if captured and "otlp:content_not_captured" in call.redactions:
        call.redactions.remove("otlp:content_not_captured")
    if exchange["trace_id"] not in turn.traces:
        turn.traces = sorted({*turn.traces, exchange["trace_id"]})
