"""One model call is one round, whoever reports it
(docs/otlp-mapping.md, 'One model call, one round').

Two instrumentations may report the same model call: the Anthropic SDK 2.x traces itself
(`anthropic.messages.create`) whenever a tracer provider is registered, and OpenLLMetry's or
OpenInference's Anthropic instrumentation reports the same request again, in another trace
(OpenLLMetry) or as the parent of the SDK's span (OpenInference). Model-call records are the same
call when
- they carry the same response id (`gen_ai.response.id`, OpenInference's `output.value` `id`),
  in the same `service.name`, and their spans overlap in time; or
- one is nested in the other (a model-call span with a model-call ancestor).
Of each such group one record stays, the one that says most (content first), the earliest
in (start, end, span id) order on a tie; what it lacks (model, tools, conversation ids...) is
taken from the others, and the traces of the others are kept with it (`duplicate_traces`), so
that the turn still owns them. Its token counts are those of the report nearest the request
(the one that started last): a wrapper may count a stream wrong. The others are not rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Record = dict[str, Any]

# Filled from the others when the kept record lacks them.
_FILLED = (
    "input",
    "output",
    "system",
    "tools",
    "model",
    "provider",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "finish_reasons",
    "agent_name",
)


def _key(record: Record) -> tuple[str, str]:
    return record["trace_id"], record["span_id"]


def _order(record: Record) -> tuple[int, int, str, str]:
    return record["start_ns"], record["end_ns"], record["span_id"], record["trace_id"]


def _says(record: Record) -> tuple[int, ...]:
    """How much a record says, content first."""
    return (
        int(bool(record.get("output"))),
        int(bool(record.get("input"))),
        int(bool(record.get("tools"))),
        int(record.get("input_tokens") is not None),
    )


def _overlap(a: Record, b: Record) -> bool:
    return a["start_ns"] <= (b["end_ns"] or b["start_ns"]) and b["start_ns"] <= (
        a["end_ns"] or a["start_ns"]
    )


def one_round_per_call(
    llms: Sequence[Record], ancestors: Callable[[Record], list[Record]]
) -> list[Record]:
    """The model-call records with each call's duplicates merged into one, in the given order."""
    parent: dict[tuple[str, str], tuple[str, str]] = {_key(r): _key(r) for r in llms}

    def find(key: tuple[str, str]) -> tuple[str, str]:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    def union(a: tuple[str, str], b: tuple[str, str]) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    by_response: dict[tuple[str, str], list[Record]] = {}
    for record in llms:
        for ancestor in ancestors(record):
            if ancestor["class"] == "llm" and _key(ancestor) in parent:
                union(_key(record), _key(ancestor))
                break
        response = record.get("response_id")
        if response:
            same = by_response.setdefault((record["service"], response), [])
            for other in same:
                if _overlap(record, other):
                    union(_key(record), _key(other))
            same.append(record)

    groups: dict[tuple[str, str], list[Record]] = {}
    for record in llms:
        groups.setdefault(find(_key(record)), []).append(record)
    if all(len(g) == 1 for g in groups.values()):
        return list(llms)
    kept: dict[tuple[str, str], Record] = {}
    for root, members in groups.items():
        if len(members) == 1:
            kept[root] = members[0]
            continue
        members = sorted(members, key=_order)
        best = max(members, key=_says)  # the earliest of those that say most
        merged = dict(best)
        others = [r for r in members if r is not best]
        for other in others:
            for name in _FILLED:
                if merged.get(name) is None and other.get(name) is not None:
                    merged[name] = other[name]
            ids = other.get("conversation_ids")
            if ids:
                merged["conversation_ids"] = {**ids, **(merged.get("conversation_ids") or {})}
        # Usage from the report nearest the request: the one that started last. Wrappers
        # re-count streams (OpenLLMetry adds message_start's output tokens to the total).
        counted = [r for r in members if r.get("output_tokens") is not None]
        if counted:
            inner = max(counted, key=_order)
            for name in ("input_tokens", "output_tokens", "cached_tokens"):
                if inner.get(name) is not None:
                    merged[name] = inner[name]
        traces = {r["trace_id"] for r in others} - {best["trace_id"]}
        if traces:
            merged["duplicate_traces"] = sorted(traces)
        kept[root] = merged
    out = []
    for record in llms:
        root = find(_key(record))
        if root in kept and kept[root] is not None:
            out.append(kept[root])
            kept[root] = None  # type: ignore[assignment]
    return sorted(out, key=_order)
