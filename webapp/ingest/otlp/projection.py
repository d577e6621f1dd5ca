"""The projection: normalized span and log records → conversations, turns, rounds, calls.

A pure function of the set of records: no Flask, no database, no clock. The same set gives
the same plans whatever order it arrived in, and whatever else was sent twice: every choice
below sorts by (start, end, span id) or by keys, never by arrival.

Steps, each a function below:
1. `_assemble`: each LLM span's input and output messages, from its own attributes, else from
   its log records, else from the fallbacks (docs/otlp-mapping.md, 'Where messages are read').
2. `_turn_keys`: which turn each LLM span belongs to: agent ancestor, continuation by tool-call
   ids, shared parent, or its own (docs/otlp-mapping.md, 'Turns').
3. `_build_turn`: rounds (docs/otlp-mapping.md, 'Rounds'), calls with their results and
   timings (docs/otlp-mapping.md, 'Tool calls and their results'), the user and assistant
   messages (docs/otlp-mapping.md, 'User and assistant messages').
4. `_conversations`: which conversation each turn goes to
   (docs/otlp-mapping.md, 'Which conversation a turn joins').

Times stay in nanoseconds; the writer turns them into datetimes.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from . import mcp
from . import messages as m
from .duplicates import one_round_per_call
from .genai_logs import OPERATION_DETAILS
from .log_order import log_order
from .normalize import CONVERSATION_KEYS, head_system_text
from .records import STATUS_ERROR
from .tool_spans import match as match_tool_span
from .turn_keys import turn_agent

Record = dict[str, Any]

DEFAULT_STITCH_WINDOW_SECONDS = 86_400
# The same marker as webapp.sql.CONTENT_NOT_CAPTURED (this module is pure: no SQL import).
CONTENT_NOT_CAPTURED = "otlp:content_not_captured"
MAX_EXTERNAL_ID = 255


@dataclass(frozen=True)
class Options:
    stitch_window_seconds: int = DEFAULT_STITCH_WINDOW_SECONDS
    # Keys tried before the standard conversation-id keys (TOOLSCOPE_OTLP_CONVERSATION_KEYS).
    conversation_keys: tuple[str, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return (
            *self.conversation_keys,
            *(k for k in CONVERSATION_KEYS if k not in self.conversation_keys),
        )


@dataclass
class CallPlan:
    sequence_index: int
    external_id: str
    function_name: str
    arguments: dict[str, Any] | None
    created_ns: int
    response: str | None = None
    response_ns: int | None = None
    started_ns: int | None = None
    ended_ns: int | None = None
    is_error: bool = False
    redactions: list[str] = field(default_factory=list)
    span_id: str | None = None  # the tool-execution span, when one matched
    mcp: dict[str, Any] | None = None  # the MCP exchange that carried it (mcp.attach)


@dataclass
class UsagePlan:
    model: str | None
    provider: str | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    created_ns: int
    # The LLM span's end, and the text it returned alongside its tool calls (a round's own
    # text; the final answer is the message's content).
    ended_ns: int | None = None
    content: str | None = None


USAGE_FIELDS = fields(UsagePlan)


@dataclass
class RoundPlan:
    index: int
    trace_id: str
    span_id: str | None  # None: a synthetic round (its LLM span has not arrived)
    usage: UsagePlan | None
    calls: list[CallPlan]


@dataclass
class TurnPlan:
    key: str
    trace_id: str
    service: str
    start_ns: int
    user_id: str
    user_content: str | None  # None: no user message is written
    assistant_id: str
    assistant_content: str | None
    model: str | None
    status: str
    rounds: list[RoundPlan]
    system_prompt: str | None
    tools: list[dict[str, Any]] | None
    agent_name: str | None
    content_captured: bool
    traces: list[str]
    explicit_id: str | None = None
    conversation: str = ""

    def digest(self) -> str:
        """Changes whenever anything written for this turn would change."""
        rounds = [
            (
                r.index,
                r.trace_id,
                r.span_id,
                # Its fields as a tuple, as astuple gave (which deep-copied each one: 5% of the
                # write path's CPU for ints and strings).
                tuple(getattr(r.usage, f.name) for f in USAGE_FIELDS)
                if r.usage is not None
                else None,
                [
                    (
                        c.sequence_index,
                        c.external_id,
                        c.function_name,
                        c.arguments,
                        c.created_ns,
                        c.response,
                        c.response_ns,
                        c.started_ns,
                        c.ended_ns,
                        c.is_error,
                        c.redactions,
                        c.span_id,
                        c.mcp,
                    )
                    for c in r.calls
                ],
            )
            for r in self.rounds
        ]
        values = [getattr(self, f.name) for f in TURN_FIELDS if f.name != "rounds"]
        data = json.dumps([values, rounds], sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()


TURN_FIELDS = fields(TurnPlan)


@dataclass
class ConversationPlan:
    external_id: str
    metadata: dict[str, Any]
    created_ns: int
    system_prompt: str | None
    tools: list[dict[str, Any]] | None
    turns: list[TurnPlan]


# --- 1. Assembly ------------------------------------------------------------------------------


def _order(record: Record) -> tuple[int, int, str, str]:
    return record["start_ns"], record["end_ns"], record["span_id"], record["trace_id"]


def _key(record: Record) -> tuple[str, str]:
    return record["trace_id"], record["span_id"]


def _assemble(llm: Record, logs: Sequence[Record]) -> Record:
    """The LLM record with `input`/`output`/`system` filled from its log records when the span
    itself has none. Content sent on both (openai-v2 wrapped, Agent Framework) is read once:
    the span's wins."""
    if llm.get("input") is not None and llm.get("output") is not None:
        return llm
    details = [r for r in logs if r["event"] == OPERATION_DETAILS]
    out = dict(llm)
    if out.get("input") is None:
        out["input"] = _logged_input(details, logs)
        if out["input"] is None:
            out["input"] = llm.get("input_fallback")
    if out.get("output") is None:
        out["output"] = _logged_output(details, logs)
        if out["output"] is None:
            out["output"] = llm.get("output_fallback")
    if out.get("system") is None:
        out["system"] = next((d["system"] for d in details if d.get("system")), None)
    return out


def _logged_input(details: Sequence[Record], logs: Sequence[Record]) -> list[m.Message] | None:
    for record in details:
        if record.get("input") is not None:
            return record["input"]
    found = [r["message"] for r in logs if "message" in r and "choice_index" not in r]
    return found or None


def _logged_output(details: Sequence[Record], logs: Sequence[Record]) -> list[m.Message] | None:
    for record in details:
        if record.get("output") is not None:
            return record["output"]
    choices = sorted((r for r in logs if "choice_index" in r), key=lambda r: r["choice_index"])
    return [r["message"] for r in choices] or None


# --- 2. Turn keys -----------------------------------------------------------------------------


class _Index:
    """The records of a component, indexed for the lookups the rules make."""

    def __init__(self, spans: Iterable[Record], logs: Iterable[Record]) -> None:
        self.spans: dict[tuple[str, str], Record] = {}
        for record in spans:
            self.spans[(record["trace_id"], record["span_id"])] = record
        by_span: dict[tuple[str, str], list[Record]] = defaultdict(list)
        self.tool_messages: dict[str, list[Record]] = defaultdict(list)
        for record in logs:
            if record["trace_id"]:
                by_span[(record["trace_id"], record["span_id"])].append(record)
        for records in by_span.values():
            records.sort(key=log_order)
        self.logs = by_span
        self.by_trace: dict[str, list[Record]] = defaultdict(list)
        for record in sorted(self.spans.values(), key=_order):
            self.by_trace[record["trace_id"]].append(record)
        self.llms = [
            _assemble(r, by_span.get(_key(r), ()))
            for r in sorted(self.spans.values(), key=_order)
            if r["class"] == "llm"
        ]
        # One model call is one round, whoever reports it (duplicates.py).
        self.llms = one_round_per_call(self.llms, self.ancestors)
        self.llm_by_key = {_key(r): r for r in self.llms}
        # Tool calls some stored LLM span emitted (a later span's history needs no synthetic
        # round for them).
        self.emitted_ids = {p["id"] for r in self.llms for p in _output_calls(r) if p["id"]}
        self.emitted_signatures = {
            _signature(calls) for r in self.llms if (calls := _output_calls(r))
        }

    def parent(self, record: Record) -> Record | None:
        parent_id = record.get("parent_span_id")
        if not parent_id:
            return None
        return self.spans.get((record["trace_id"], parent_id))

    def ancestors(self, record: Record) -> list[Record]:
        out: list[Record] = []
        seen = {record["span_id"]}
        node = self.parent(record)
        while node is not None and node["span_id"] not in seen and len(out) < 256:
            out.append(node)
            seen.add(node["span_id"])
            node = self.parent(node)
        return out

    def nearest_agent(self, record: Record) -> Record | None:
        """The agent span that keys the record's turn: the outermost one, graph steps left
        out (docs/otlp-mapping.md, 'The outermost agent span keys the turn')."""
        return turn_agent(self.ancestors(record))


def _tail_ids(llm: Record) -> list[str]:
    ids = []
    for message in m.tail(llm.get("input") or []):
        for part in message["parts"]:
            if part["type"] in ("tool_call", "tool_call_response") and part["id"]:
                ids.append(part["id"])
    return ids


def _has_tool_tail(llm: Record) -> bool:
    return any(
        part["type"] in ("tool_call", "tool_call_response")
        for message in m.tail(llm.get("input") or [])
        for part in message["parts"]
    )


def _output_calls(llm: Record) -> list[m.Part]:
    output = llm.get("output")
    return m.tool_calls(output[0]) if output else []


def _signature(calls: Iterable[m.Part]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (c["name"], json.dumps(c["arguments"], sort_keys=True, ensure_ascii=False)) for c in calls
    )


def _last_call_message(messages: Sequence[m.Message]) -> m.Message | None:
    for message in reversed(messages):
        if message["role"] == "assistant" and m.tool_calls(message):
            return message
    return None


def _last_prompt(llm: Record) -> str | None:
    messages = llm.get("input") or []
    i = m.last_user_index(messages)
    return m.text_of(messages[i]) if i >= 0 else None


def _turn_keys(index: _Index, options: Options) -> dict[tuple[str, str], str]:
    """(trace id, span id) → turn key, for every LLM span (docs/otlp-mapping.md, 'Turns')."""
    window_ns = options.stitch_window_seconds * 1_000_000_000
    keys: dict[tuple[str, str], str] = {}
    by_call_id: dict[str, list[Record]] = defaultdict(list)
    by_signature: dict[tuple[Any, ...], list[Record]] = defaultdict(list)
    for llm in index.llms:
        keys[_key(llm)] = _turn_key(index, llm, keys, by_call_id, by_signature, window_ns)
        calls = _output_calls(llm)
        for call in calls:
            if call["id"]:
                by_call_id[call["id"]].append(llm)
        if calls and not any(c["id"] for c in calls):
            by_signature[_signature(calls)].append(llm)
    return keys


def _turn_key(
    index: _Index,
    llm: Record,
    keys: Mapping[tuple[str, str], str],
    by_call_id: Mapping[str, list[Record]],
    by_signature: Mapping[tuple[Any, ...], list[Record]],
    window_ns: int,
) -> str:
    agent = index.nearest_agent(llm)
    if agent is not None:
        return f"agent:{agent['trace_id']}:{agent['span_id']}"
    if llm.get("input") and _has_tool_tail(llm):
        earlier = _continued(llm, by_call_id, by_signature, window_ns)
        if earlier is not None:
            return keys[_key(earlier)]
    if not llm.get("input") and llm.get("parent_span_id"):
        return f"parent:{llm['trace_id']}:{llm['parent_span_id']}"
    return f"llm:{llm['trace_id']}:{llm['span_id']}"


def _continued(
    llm: Record,
    by_call_id: Mapping[str, list[Record]],
    by_signature: Mapping[tuple[Any, ...], list[Record]],
    window_ns: int,
) -> Record | None:
    """The latest earlier LLM span whose output calls this span's input answers (rule 2)."""
    ids = _tail_ids(llm)
    candidates: dict[tuple[str, str], Record] = {}
    if ids:
        for call_id in ids:
            for earlier in by_call_id.get(call_id, ()):
                candidates[_key(earlier)] = earlier
    else:
        message = _last_call_message(m.tail(llm["input"]))
        if message is not None:
            for earlier in by_signature.get(_signature(m.tool_calls(message)), ()):
                candidates[_key(earlier)] = earlier
    prompt = _last_prompt(llm)
    best = None
    for earlier in candidates.values():
        if not (
            earlier["start_ns"] < llm["start_ns"]
            and earlier["service"] == llm["service"]
            and llm["start_ns"] - earlier["start_ns"] <= window_ns
        ):
            continue
        earlier_prompt = _last_prompt(earlier)
        if prompt is not None and earlier_prompt is not None and prompt != earlier_prompt:
            continue
        if best is None or _order(earlier) > _order(best):
            best = earlier
    return best


# --- 3. Turns ---------------------------------------------------------------------------------


@dataclass
class _Turn:
    key: str
    llms: list[Record]
    agent: Record | None
    parent_id: str | None  # rule 3's shared parent


def _requested_tools(llm: Record) -> bool | None:
    """Whether the round asked for tools: from its output, else its finish reasons; None when
    neither is known."""
    output = llm.get("output")
    if output:
        return bool(m.tool_calls(output[0]))
    reasons = llm.get("finish_reasons")
    if reasons:
        return any(r in m.TOOL_FINISH_REASONS for r in reasons)
    return None


def _rounds_of(llms: list[Record]) -> list[Record]:
    """The turn's LLM spans without retried attempts (an ERROR span with no output that another
    LLM span follows)."""
    return [
        llm
        for i, llm in enumerate(llms)
        if not (llm["status"] == STATUS_ERROR and not llm.get("output") and i < len(llms) - 1)
    ]


def _turn_tools(index: _Index, turn: _Turn, rounds: list[Record]) -> list[Record]:
    """Tool-execution spans that belong to the turn: under its agent, under its shared parent,
    or siblings of its LLM spans, in the turn's traces."""
    traces = {r["trace_id"] for r in rounds}
    parents = {r["parent_span_id"] for r in rounds if r.get("parent_span_id")}
    if turn.parent_id:
        parents.add(turn.parent_id)
    found = []
    for trace_id in sorted(traces):
        for record in index.by_trace[trace_id]:
            if record["class"] != "tool" or record.get("mcp"):
                continue  # an MCP span carries a call, it is not one (mcp.attach)
            if turn.agent is not None:
                if (
                    index.nearest_agent(record) is turn.agent
                    or record.get("parent_span_id") in parents
                ):
                    found.append(record)
            elif record.get("parent_span_id") in parents and index.nearest_agent(record) is None:
                found.append(record)
    return found


def _call_id_tools(index: _Index, traces: Iterable[str]) -> dict[str, Record]:
    """Tool-execution spans of the traces by call id (the earliest one per id)."""
    out: dict[str, Record] = {}
    for trace_id in sorted(set(traces)):
        for record in index.by_trace[trace_id]:
            if record["class"] == "tool" and record["tool"]["id"]:
                out.setdefault(record["tool"]["id"], record)
    return out


def _later_responses(
    rounds: list[Record], start: int
) -> tuple[dict[str, tuple[m.Part, Record]], list[tuple[list[m.Part], Record]]]:
    """Results the model saw in rounds start.. : by call id (the first round that carries each),
    and, for calls without ids, each round's (empty-id responses in order, round)."""
    by_id: dict[str, tuple[m.Part, Record]] = {}
    anonymous: list[tuple[list[m.Part], Record]] = []
    for llm in rounds[start:]:
        unnamed = []
        for message in llm.get("input") or []:
            for part in message["parts"]:
                if part["type"] != "tool_call_response":
                    continue
                if part["id"]:
                    by_id.setdefault(part["id"], (part, llm))
                else:
                    unnamed.append(part)
        anonymous.append((unnamed, llm))
    return by_id, anonymous


def _tool_message_results(index: _Index, traces: Iterable[str]) -> dict[str, m.Part]:
    """Results from `gen_ai.tool.message` log records of the traces, by call id."""
    out: dict[str, m.Part] = {}
    for (trace_id, _span), records in sorted(index.logs.items()):
        if trace_id not in traces:
            continue
        for record in records:
            message = record.get("message")
            if record["event"] == "gen_ai.tool.message" and message:
                for part in message["parts"]:
                    if part["type"] == "tool_call_response" and part["id"]:
                        out.setdefault(part["id"], part)
    return out


def _call(sequence_index: int, part: m.Part, created_ns: int) -> CallPlan:
    call = CallPlan(
        sequence_index=sequence_index,
        external_id=part["id"],
        function_name=part["name"],
        arguments=part["arguments"],
        created_ns=created_ns,
    )
    call.redactions = list(part.get("redactions") or [])
    if part.get("skipped"):
        call.redactions.append("otlp:skipped")
    return call


def _apply_tool_span(call: CallPlan, tool: Record) -> None:
    data = tool["tool"]
    call.span_id = tool["span_id"]
    call.started_ns, call.ended_ns = tool["start_ns"], tool["end_ns"]
    call.is_error = bool(data["error"])
    if call.arguments is None and data["arguments"] is not None:
        call.arguments = data["arguments"]
    if call.response is None:
        if data["result"] is not None:
            call.response = data["result"]
            call.response_ns = tool["end_ns"]
        elif call.is_error:
            call.response = data["error_text"] or ""
            call.response_ns = tool["end_ns"]
    elif call.response_ns is None:
        call.response_ns = tool["end_ns"]
    for name in data.get("redactions") or ():
        if name not in call.redactions:
            call.redactions.append(name)
    if data.get("skipped") and "otlp:skipped" not in call.redactions:
        call.redactions.append("otlp:skipped")


def _build_turn(index: _Index, turn: _Turn, options: Options) -> TurnPlan | None:
    rounds = _rounds_of(turn.llms)
    if not rounds:
        return None
    first = rounds[0]
    turn_tools = _turn_tools(index, turn, rounds)
    # A span of a tool the model was not offered is not a call of it, when the offer is known:
    # ADK's `execute_tool (merged)` (docs/otlp-mapping.md, 'Execution spans that are not calls').
    offered = {t["name"] for t in first.get("tools") or (turn.agent or {}).get("tools") or ()}
    if offered:
        turn_tools = [t for t in turn_tools if t["tool"]["name"] in offered]
    traces = {r["trace_id"] for r in turn.llms} | {t["trace_id"] for t in turn_tools}
    by_call_id = _call_id_tools(index, traces)
    logged = _tool_message_results(index, traces)

    # Calls of each real round: its output's calls, else those of the next round's history,
    # else the execution spans that started in between.
    round_calls: list[list[tuple[m.Part | None, Record | None]]] = []
    for r, llm in enumerate(rounds):
        next_llm = rounds[r + 1] if r + 1 < len(rounds) else None
        output = llm.get("output")
        parts = _output_calls(llm) if output else []
        if not output and next_llm is not None:
            message = _last_call_message(m.tail(next_llm.get("input") or []))
            parts = m.tool_calls(message) if message else []
        entries: list[tuple[m.Part | None, Record | None]] = [(p, None) for p in parts]
        if not output and not parts:
            end = next_llm["start_ns"] if next_llm else None
            entries = [
                (None, t)
                for t in sorted(turn_tools, key=lambda t: (t["start_ns"], t["span_id"]))
                if t["start_ns"] >= llm["end_ns"] and (end is None or t["start_ns"] < end)
            ]
        round_calls.append(entries)

    # Synthetic rounds: tool-call messages in the first round's tail that no stored span emitted.
    synthetic = [
        msg
        for msg in m.tail(first.get("input") or [])
        if msg["role"] == "assistant"
        and m.tool_calls(msg)
        and not any(p["id"] in index.emitted_ids for p in m.tool_calls(msg))
        and _signature(m.tool_calls(msg)) not in index.emitted_signatures
    ]

    plans: list[RoundPlan] = []
    used_tools: set[str] = set()
    first_responses, _ = _later_responses(rounds, 0)
    for msg in synthetic:
        calls = []
        for seq, part in enumerate(m.tool_calls(msg)):
            call = _call(seq, part, first["start_ns"])
            _resolve(call, part, first_responses, by_call_id, logged, used_tools, None, [])
            calls.append(call)
        plans.append(RoundPlan(len(plans), first["trace_id"], None, None, calls))

    for r, (llm, entries) in enumerate(zip(rounds, round_calls, strict=True)):
        by_id, anonymous = _later_responses(rounds, r + 1)
        window = (llm["end_ns"], rounds[r + 1]["start_ns"] if r + 1 < len(rounds) else None)
        calls = []
        unnamed = _anonymous_results(entries, anonymous)
        for seq, (part, tool) in enumerate(entries):
            if part is None:
                assert tool is not None
                call = CallPlan(seq, tool["tool"]["id"], tool["tool"]["name"], None, llm["end_ns"])
                _apply_tool_span(call, tool)
                used_tools.add(tool["span_id"])
            else:
                call = _call(seq, part, llm["end_ns"])
                name_pool = [t for t in turn_tools if not t["tool"]["id"]]
                _resolve(call, part, by_id, by_call_id, logged, used_tools, window, name_pool)
                if call.response is None and seq in unnamed:
                    result_part, carrier = unnamed[seq]
                    call.response, call.response_ns = result_part["response"], carrier["start_ns"]
            calls.append(call)
        plans.append(RoundPlan(len(plans), llm["trace_id"], llm["span_id"], _usage(llm), calls))

    _attach_unmatched(plans, rounds, turn_tools, used_tools, len(synthetic))
    for plan in plans:
        plan.calls = [c for c in plan.calls if "otlp:skipped" not in c.redactions]
        for call in plan.calls:
            if (
                call.arguments is None
                and call.response is None
                and call.span_id is not None
                and not call.is_error
                and CONTENT_NOT_CAPTURED not in call.redactions
            ):
                call.redactions.append(CONTENT_NOT_CAPTURED)
    return _turn_plan(index, turn, rounds, plans, options)


def _anonymous_results(
    entries: list[tuple[m.Part | None, Record | None]],
    anonymous: list[tuple[list[m.Part], Record]],
) -> dict[int, tuple[m.Part, Record]]:
    """Calls without ids get the results without ids of the next round that has any, by
    position after the assistant message."""
    positions = [i for i, (part, _) in enumerate(entries) if part is not None and not part["id"]]
    if not positions:
        return {}
    for results, carrier in anonymous:
        if results:
            return {
                seq: (results[k], carrier) for k, seq in enumerate(positions) if k < len(results)
            }
    return {}


def _resolve(
    call: CallPlan,
    part: m.Part,
    responses: Mapping[str, tuple[m.Part, Record]],
    by_call_id: Mapping[str, Record],
    logged: Mapping[str, m.Part],
    used_tools: set[str],
    window: tuple[int, int | None] | None,
    name_pool: list[Record],
) -> None:
    """A call's result, timings and error flag: what the model saw next, else the execution
    span's result, else a `gen_ai.tool.message` record."""
    if part["id"] and part["id"] in responses:
        result, carrier = responses[part["id"]]
        call.response = result["response"]
        call.response_ns = carrier["start_ns"]
        for name in result.get("redactions") or ():
            if name not in call.redactions:
                call.redactions.append(name)
    tool = by_call_id.get(part["id"]) if part["id"] else None
    if tool is None and window is not None:
        # docs/otlp-mapping.md, 'Tool spans without a call id'
        tool = match_tool_span(part, name_pool, used_tools, window)
    if tool is not None:
        used_tools.add(tool["span_id"])
        _apply_tool_span(call, tool)
    if call.response is None and part["id"] in logged:
        call.response = logged[part["id"]]["response"]


def _attach_unmatched(
    plans: list[RoundPlan],
    rounds: list[Record],
    turn_tools: list[Record],
    used: set[str],
    offset: int,
) -> None:
    """Execution spans that match no call join the last round that ended before they started,
    after its other calls."""
    for tool in sorted(turn_tools, key=lambda t: (t["start_ns"], t["span_id"])):
        if tool["span_id"] in used:
            continue
        target = 0
        for r, llm in enumerate(rounds):
            if llm["end_ns"] <= tool["start_ns"]:
                target = r
        plan = plans[offset + target]
        call = CallPlan(
            len(plan.calls),
            tool["tool"]["id"],
            tool["tool"]["name"],
            None,
            rounds[target]["end_ns"],
        )
        _apply_tool_span(call, tool)
        plan.calls.append(call)
        used.add(tool["span_id"])


def _usage(llm: Record) -> UsagePlan:
    output = llm.get("output")
    return UsagePlan(
        model=llm.get("model"),
        provider=llm.get("provider"),
        input_tokens=llm.get("input_tokens"),
        output_tokens=llm.get("output_tokens"),
        cached_tokens=llm.get("cached_tokens"),
        created_ns=llm["start_ns"],
        ended_ns=llm["end_ns"],
        content=m.text_of(output[0]) if output and m.tool_calls(output[0]) else None,
    )


def _has_content(llm: Record) -> bool:
    """Whether the span carried message content (structure alone does not count)."""
    for message in [*(llm.get("input") or ()), *(llm.get("output") or ())]:
        for part in message["parts"]:
            if part["type"] == "text" or part["type"] == "tool_call_response":
                return True
            if part["type"] == "tool_call" and part["arguments"] is not None:
                return True
    return False


def _turn_plan(
    index: _Index, turn: _Turn, rounds: list[Record], plans: list[RoundPlan], options: Options
) -> TurnPlan:
    first, last = rounds[0], rounds[-1]
    agent = turn.agent
    start = agent["start_ns"] if agent is not None else first["start_ns"]
    base = f"otel-{first['trace_id']}-{first['span_id']}"

    user = _last_prompt(first)
    if user is None and agent is not None:
        agent_input = agent.get("input") or []
        i = m.last_user_index(agent_input)
        user = m.text_of(agent_input[i]) if i >= 0 else agent.get("agent_input_text")

    output = last.get("output")
    requested = _requested_tools(last)
    final_text = m.text_of(output[0]) if output and requested is False else None
    errored = last["status"] == STATUS_ERROR or (
        agent is not None and agent["status"] == STATUS_ERROR
    )
    if errored and final_text is None:
        status = "failed"
    elif requested is False or (agent is not None and agent["status"] != STATUS_ERROR):
        status = "completed"
    else:
        status = "in_progress"

    system = head_system_text(first.get("input") or []) or first.get("system")
    if system is None and agent is not None:
        system = agent.get("system")
    tools = first.get("tools") or (agent.get("tools") if agent is not None else None)
    captured = any(_has_content(llm) for llm in rounds)
    agent_name = (agent or {}).get("agent_name") or first.get("agent_name")
    plan = TurnPlan(
        key=turn.key,
        trace_id=(agent or first)["trace_id"],
        service=first["service"],
        start_ns=start,
        user_id=f"{base}-u",
        user_content=user,
        assistant_id=f"{base}-a",
        assistant_content=final_text,
        model=last.get("model"),
        status=status,
        rounds=plans,
        system_prompt=system,
        tools=tools,
        agent_name=agent_name,
        content_captured=captured,
        traces=sorted(
            {r["trace_id"] for r in turn.llms}
            | {t for r in turn.llms for t in r.get("duplicate_traces", ())}
        ),
    )
    plan.explicit_id = _explicit_id(index, turn, options)
    return plan


# --- 4. Conversations -------------------------------------------------------------------------


def _id_on(record: Record, keys: Sequence[str]) -> str | None:
    found = record.get("conversation_ids") or {}
    return next((found[k] for k in keys if found.get(k)), None)


def _explicit_id(index: _Index, turn: _Turn, options: Options) -> str | None:
    """The first conversation-id key on the turn's LLM spans, its agent and the agent's
    ancestors, its tool spans, then any span of its traces
    (docs/otlp-mapping.md, 'Conversation id')."""
    keys = options.keys
    candidates: list[Record] = list(turn.llms)
    if turn.agent is not None:
        candidates += [turn.agent, *index.ancestors(turn.agent)]
    traces = sorted({r["trace_id"] for r in turn.llms})
    spans = [s for t in traces for s in index.by_trace[t]]
    candidates += [s for s in spans if s["class"] == "tool"]
    candidates += spans
    for record in candidates:
        value = _id_on(record, keys)
        if value is not None:
            return value
    return None


def conversation_external_id(value: str) -> tuple[str, str | None]:
    """A usable external id for an explicit conversation id, and the original when it had to be
    hashed (too long, NUL or `/`)."""
    if 0 < len(value) <= MAX_EXTERNAL_ID and "\x00" not in value and "/" not in value:
        return value, None
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"otel-conv-{digest}", value


def _conversations(
    turns: list[TurnPlan], index: _Index, options: Options
) -> list[ConversationPlan]:
    window_ns = options.stitch_window_seconds * 1_000_000_000
    turns.sort(key=lambda t: (t.start_ns, t.assistant_id))
    emitted: dict[str, tuple[TurnPlan, str, str]] = {}  # call id → (turn, name, arguments)
    originals: dict[str, str] = {}
    for turn in turns:
        if turn.explicit_id is not None:
            turn.conversation, original = conversation_external_id(turn.explicit_id)
            if original is not None:
                originals[turn.conversation] = original
        else:
            turn.conversation = (
                _stitched(turn, index, emitted, window_ns) or f"otel-{turn.trace_id}"
            )
        for plan in turn.rounds:
            for call in plan.calls:
                if call.external_id:
                    # By service too: two agents may reuse call ids (the stitch is per service).
                    emitted.setdefault(
                        f"{turn.service}\x00{call.external_id}",
                        (turn, call.function_name, _canon(call.arguments)),
                    )

    grouped: dict[str, list[TurnPlan]] = defaultdict(list)
    for turn in turns:
        grouped[turn.conversation].append(turn)
    out = []
    for external_id in sorted(grouped):
        members = grouped[external_id]
        metadata: dict[str, Any] = {"source": "otlp"}
        service = next((t.service for t in members if t.service), None)
        agent = next((t.agent_name for t in members if t.agent_name), None)
        if service:
            metadata["otel.service.name"] = service
        if agent:
            metadata["otel.agent.name"] = agent
        if external_id in originals:
            metadata["otel.conversation.id"] = originals[external_id]
        out.append(
            ConversationPlan(
                external_id=external_id,
                metadata=metadata,
                created_ns=members[0].start_ns,
                system_prompt=next((t.system_prompt for t in members if t.system_prompt), None),
                tools=next((t.tools for t in reversed(members) if t.tools), None),
                turns=members,
            )
        )
    return out


def _canon(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _stitched(
    turn: TurnPlan,
    index: _Index,
    emitted: Mapping[str, tuple[TurnPlan, str, str]],
    window_ns: int,
) -> str | None:
    """The conversation of an earlier turn whose tool calls this turn's first request carries
    in its history (multi-turn continuity without ids)."""
    first = next((r for r in turn.rounds if r.span_id is not None), None)
    if first is None:
        return None
    llm = index.llm_by_key.get((first.trace_id, first.span_id))
    if llm is None:
        return None
    for message in m.head(llm.get("input") or []):
        for part in m.tool_calls(message):
            found = emitted.get(f"{turn.service}\x00{part['id']}") if part["id"] else None
            if found is None:
                continue
            earlier, name, arguments = found
            if (
                earlier.service == turn.service
                and turn.start_ns - earlier.start_ns <= window_ns
                and name == part["name"]
                and arguments == _canon(part["arguments"])
            ):
                return earlier.conversation
    return None


# --- The whole projection ---------------------------------------------------------------------


def project(
    spans: Iterable[Record], logs: Iterable[Record] = (), options: Options | None = None
) -> list[ConversationPlan]:
    """Conversations with their turns, from a set of normalized span and log records."""
    options = options or Options()
    index = _Index(spans, logs)
    keys = _turn_keys(index, options)
    grouped: dict[str, list[Record]] = defaultdict(list)
    for llm in index.llms:
        grouped[keys[_key(llm)]].append(llm)
    plans = []
    for key, llms in grouped.items():
        agent = None
        parent_id = None
        if key.startswith("agent:"):
            _, trace_id, span_id = key.split(":")
            agent = index.spans[(trace_id, span_id)]
        elif key.startswith("parent:"):
            parent_id = key.split(":")[2]
        plan = _build_turn(index, _Turn(key, llms, agent, parent_id), options)
        if plan is not None:
            plans.append(plan)
    mcp.attach(plans, mcp.exchanges(index.spans.values()), index.ancestors)
    return _conversations(plans, index, options)
