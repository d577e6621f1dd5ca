"""What each LLM service call of a conversation had in its context, in tokens, by part.

Pure module (no Flask, no database). Input: a loaded :class:`~webapp.replay.History`, the token
counts stored at ingestion (:class:`StoredCounts`) and the replay options that decide what is
carried from one run to the next. Output: one :class:`ContextBar` per service call, and per tool
result how far replay carries it (:class:`CarriedResult`, the input of re-send attribution).

The model of a conversation, in conversation order:

* A **run** is one assistant message; its **service calls** are the rounds of its tool calls,
  the rounds of its stored usage, and the call that wrote its final text (one round after the
  last tool round) when it has text and no stored usage covers it.
* Service call *k* of a run sees everything replay gives the run at its start (``as_of`` = the
  run's ``created_at``), plus the run's own rounds before *k*: their tool-call arguments as
  assistant tokens, their results at full stored size (the agent's loop holds them whole).
* What replay gives the run is computed once for the whole conversation with
  :func:`webapp.replay.build.build_plan` (persistence mode, trailing trimming and source
  compaction decided by the replay itself, with the freshness window turned off), and then the
  freshness window is applied per run. That is exact because these rules only ever drop a
  result for good as time goes on: a result that is stale for one run is stale for every later
  run. It assumes runs do not overlap in time (an agent answers one message at a time).
  Results of imported runs never go stale, as in the replay.
* The context budget is *not* applied: bars show what the history holds, and the budget is a
  line on the chart, so you can see where replay would start dropping the oldest units.

Parts: ``system`` (system prompt and system messages), ``tool_definitions``, ``user``,
``assistant`` (assistant text and tool-call names plus arguments) and ``tool_results``. Counts
are content tokens only: stored counts where ingestion made them, else the ``count`` callable;
providers add a few framing tokens per message, which shows as the gap to the reported input.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import count as counter

from ..replay.build import Plan, build_plan, sorted_messages, tool_definition_tokens
from ..replay.history import History, Message, ToolCall
from ..replay.options import Persistence, ReplayOptions
from ..replay.units import Unit

__all__ = [
    "PARTS",
    "CarriedResult",
    "ContextBar",
    "ConversationContext",
    "StoredCounts",
    "conversation_context",
]

PARTS: tuple[str, ...] = ("system", "tool_definitions", "user", "assistant", "tool_results")


@dataclass(frozen=True, slots=True)
class StoredCounts:
    """Token counts made at ingestion, by row id. A missing or ``None`` entry is counted here."""

    arguments: Mapping[int, int | None] = field(default_factory=dict)
    results: Mapping[int, int | None] = field(default_factory=dict)
    messages: Mapping[int, int | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ContextBar:
    """One service call: what its input held, by part, and what the provider reported."""

    position: int  # 0-based, conversation order
    run: int  # 0-based index of the assistant run (message) it belongs to
    turn: int  # user turn it answers (1-based; 0 before the first user message)
    message_id: str  # the assistant message's external id
    message_row_id: int
    round_index: int
    model: str | None
    created_at: datetime | None
    system: int
    tool_definitions: int
    user: int
    assistant: int
    tool_results: int
    reported_input_tokens: int | None

    @property
    def total(self) -> int:
        return self.system + self.tool_definitions + self.user + self.assistant + self.tool_results

    @property
    def label(self) -> str:
        return f"#{self.run + 1} r{self.round_index}"


@dataclass(frozen=True, slots=True)
class CarriedResult:
    """A tool result, the service call that asked for it, and how long replay keeps it."""

    call_row_id: int
    function_name: str
    run: int
    call_position: int  # index, within its run, of the service call that requested it
    tokens: int  # full size, as sent within its own run
    later_runs: int  # following runs whose every service call receives it
    replayed_tokens: int  # its size in those runs (after compaction)


@dataclass(frozen=True, slots=True)
class ConversationContext:
    bars: tuple[ContextBar, ...]
    results: tuple[CarriedResult, ...]
    runs: int
    model: str | None  # the model most service calls used, for the window line


# ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pooled:
    """A kept call from an earlier run, while it is still fresh."""

    call_row_id: int
    run: int
    fresh_from: datetime  # its result's time: staleness is measured from here
    assistant: int
    result: int


@dataclass(slots=True)
class _Walk:
    """Running sums of everything earlier runs left in the history."""

    user: int = 0
    system: int = 0
    assistant: int = 0
    pool_assistant: int = 0
    pool_results: int = 0
    pool: list[tuple[datetime, int, _Pooled]] = field(default_factory=list)
    expired_at_run: dict[int, int] = field(default_factory=dict)  # call row id -> run index
    tiebreak: Iterable[int] = field(default_factory=counter)

    def add(self, item: _Pooled) -> None:
        heapq.heappush(self.pool, (item.fresh_from, next(self.tiebreak), item))  # type: ignore[call-overload]
        self.pool_assistant += item.assistant
        self.pool_results += item.result

    def expire(self, as_of: datetime, window: float | None, run: int) -> None:
        """Drop the results older than the freshness window at ``as_of``, oldest first."""
        if window is None:
            return
        while self.pool and (as_of - self.pool[0][0]).total_seconds() > window:
            _, _, item = heapq.heappop(self.pool)
            self.pool_assistant -= item.assistant
            self.pool_results -= item.result
            self.expired_at_run[item.call_row_id] = run


# An imported run is replayed as it was sent: its results never expire (webapp.replay.build).
_NEVER_STALE = datetime.max.replace(tzinfo=UTC)


class _Counter:
    """Stored counts first, the tokenizer for the rest (memoized per text)."""

    def __init__(self, stored: StoredCounts, count: Callable[[str], int]) -> None:
        self.stored = stored
        self.count = count
        self.memo: dict[str, int] = {}
        self.by_call: dict[int, int] = {}  # call row id -> name + arguments tokens

    def text(self, text: str | None) -> int:
        if not text:
            return 0
        value = self.memo.get(text)
        if value is None:
            value = self.memo[text] = self.count(text)
        return value

    def message(self, m: Message) -> int:
        stored = self.stored.messages.get(m.row_id)
        return stored if stored is not None else self.text(m.content)

    def arguments(self, c: ToolCall, arguments_json: str | None = None) -> int:
        stored = self.stored.arguments.get(c.row_id)
        if stored is not None:
            return stored
        if arguments_json is None:
            from ..replay.jsonfast import dumps

            arguments_json = "{}" if c.arguments is None else dumps(c.arguments)
        return self.text(arguments_json)

    def call_assistant(self, c: ToolCall) -> int:
        """What a call adds to the assistant's tool-call message: its name and arguments."""
        value = self.by_call.get(c.row_id)
        if value is None:
            value = self.by_call[c.row_id] = self.text(c.function_name) + self.arguments(c)
        return value

    def result(self, c: ToolCall) -> int:
        stored = self.stored.results.get(c.row_id)
        if stored is not None:
            return stored
        return self.text(c.response)


def _service_call_rounds(m: Message) -> list[int]:
    """Round indexes of the service calls a run made, in order (see the module docstring)."""
    tool_rounds = {c.round_index for c in m.tool_calls}
    rounds = tool_rounds | {s.round_index for s in m.service_calls}
    has_text = bool(m.content and not m.content.isspace())
    if has_text:
        final = max(tool_rounds) + 1 if tool_rounds else 0
        if not rounds or max(rounds) < final:
            rounds.add(final)
    return sorted(rounds)


def _replay_plan(history: History, persistence: Persistence) -> Plan:
    """What replay keeps of the whole history, with the freshness window turned off."""
    options = ReplayOptions(
        as_of=None, freshness_seconds=None, persistence=persistence, context_budget=None
    )
    return build_plan(history, options)


def _units_by_position(plan: Plan) -> dict[int, list[Unit]]:
    by_pos: dict[int, list[Unit]] = {}
    for unit in plan.units:
        by_pos.setdefault(unit.pos, []).append(unit)
    return by_pos


def _main_model(history: History) -> str | None:
    """The model most service calls (else assistant messages) used."""
    tally: dict[str, int] = {}
    for m in history.messages:
        models = [s.model for s in m.service_calls if s.model] or ([m.model] if m.model else [])
        for model in models:
            tally[model] = tally.get(model, 0) + 1
    return max(tally, key=lambda k: (tally[k], k)) if tally else None


def conversation_context(
    history: History,
    stored: StoredCounts,
    *,
    count: Callable[[str], int],
    freshness_seconds: float | None,
    persistence: Persistence = "per-run",
) -> ConversationContext:
    """Per service call context by part, and how far each tool result is carried.

    ``count`` counts tokens of texts without a stored count (system prompt, tool definitions,
    compacted results); pass a real tokenizer such as ``webapp.tokens.count_tokens``.
    """
    tokens = _Counter(stored, count)
    plan = _replay_plan(history, persistence)
    units_by_pos = _units_by_position(plan)
    system_fixed = tokens.text(plan.system_prompt)
    definitions = sum(tool_definition_tokens(t, tokens.text) for t in plan.tools)

    walk = _Walk()
    bars: list[ContextBar] = []
    pending: list[tuple[CarriedResult, bool]] = []  # (result, kept by replay)
    runs = 0
    turn = 0
    for pos, m in enumerate(sorted_messages(history)):
        if m.role == "user":
            turn += 1
        if m.role == "assistant":
            walk.expire(m.created_at, freshness_seconds, runs)
            bars.extend(
                _run_bars(m, runs, turn, len(bars), walk, tokens, system_fixed, definitions)
            )
            pending.extend(_run_results(m, runs, units_by_pos.get(pos, ()), tokens))
            _carry(m, runs, units_by_pos.get(pos, ()), tokens, walk)
            runs += 1
        else:
            for unit in units_by_pos.get(pos, ()):
                if unit.kind == "user":
                    walk.user += tokens.message(m)
                elif unit.kind == "system":
                    walk.system += tokens.message(m)
    results = tuple(
        _with_reach(result, kept, walk.expired_at_run, runs) for result, kept in pending
    )
    return ConversationContext(tuple(bars), results, runs, _main_model(history))


def _run_bars(
    m: Message,
    run: int,
    turn: int,
    start: int,
    walk: _Walk,
    tokens: _Counter,
    system_fixed: int,
    definitions: int,
) -> list[ContextBar]:
    usage = {s.round_index: s for s in m.service_calls}
    calls = sorted(m.tool_calls, key=lambda c: (c.round_index, c.sequence_index, c.row_id))
    bars = []
    own_assistant = own_results = 0
    i = 0
    for position, round_index in enumerate(_service_call_rounds(m)):
        # The run's own rounds before this one are in the loop's message list.
        while i < len(calls) and calls[i].round_index < round_index:
            own_assistant += tokens.call_assistant(calls[i])
            if calls[i].response is not None:
                own_results += tokens.result(calls[i])
            i += 1
        reported = usage.get(round_index)
        bars.append(
            ContextBar(
                position=start + position,
                run=run,
                turn=turn,
                message_id=m.external_id,
                message_row_id=m.row_id,
                round_index=round_index,
                model=(reported.model if reported and reported.model else m.model),
                created_at=(reported.created_at if reported and reported.created_at else None)
                or m.created_at,
                system=system_fixed + walk.system,
                tool_definitions=definitions,
                user=walk.user,
                assistant=walk.assistant + walk.pool_assistant + own_assistant,
                tool_results=walk.pool_results + own_results,
                reported_input_tokens=reported.input_tokens if reported else None,
            )
        )
    return bars


def _kept_calls(units: Iterable[Unit]) -> dict[int, tuple[Unit, str | None]]:
    """Call row id -> (its round unit, replayed result text) for calls replay keeps."""
    return {c.row_id: (u, c.result) for u in units if u.kind == "round" for c in u.calls}


def _run_results(
    m: Message, run: int, units: Iterable[Unit], tokens: _Counter
) -> list[tuple[CarriedResult, bool]]:
    """Every result the run produced (it is sent within the run), and whether replay keeps it."""
    positions = {r: i for i, r in enumerate(_service_call_rounds(m))}
    kept = _kept_calls(units)
    out = []
    for c in sorted(m.tool_calls, key=lambda c: (c.round_index, c.sequence_index, c.row_id)):
        if c.response is None:
            continue
        full = tokens.result(c)
        replayed = full
        if c.row_id in kept:
            text = kept[c.row_id][1]
            replayed = full if text == c.response else tokens.text(text)
        result = CarriedResult(
            call_row_id=c.row_id,
            function_name=c.function_name,
            run=run,
            call_position=positions[c.round_index],
            tokens=full,
            later_runs=0,
            replayed_tokens=replayed,
        )
        out.append((result, c.row_id in kept))
    return out


def _carry(m: Message, run: int, units: Iterable[Unit], tokens: _Counter, walk: _Walk) -> None:
    """Add what replay keeps of this run to the history later runs start from."""
    by_row = {c.row_id: c for c in m.tool_calls}
    for unit in units:
        if unit.kind == "text":
            walk.assistant += tokens.message(m)
        elif unit.kind == "round":
            for out in unit.calls:
                c = by_row[out.row_id]
                full = tokens.result(c)
                result = full if out.result == c.response else tokens.text(out.result)
                walk.add(
                    _Pooled(
                        call_row_id=c.row_id,
                        run=run,
                        fresh_from=_NEVER_STALE
                        if m.imported
                        else c.response_created_at or c.created_at,
                        assistant=tokens.call_assistant(c),
                        result=result,
                    )
                )


def _with_reach(
    result: CarriedResult, kept: bool, expired_at_run: Mapping[int, int], runs: int
) -> CarriedResult:
    if not kept:
        later = 0
    else:
        # Expired when run j started: runs result.run+1 .. j-1 received it.
        end = expired_at_run.get(result.call_row_id, runs)
        later = max(0, end - result.run - 1)
    return CarriedResult(
        call_row_id=result.call_row_id,
        function_name=result.function_name,
        run=result.run,
        call_position=result.call_position,
        tokens=result.tokens,
        later_runs=later,
        replayed_tokens=result.replayed_tokens,
    )
