"""Rules 1-7: from a stored history to the neutral list of units (see ``units.py``).

Order of work per assistant message (conversation order, messages sorted by
``(created_at, row_id)``):

1. ``as_of``: messages and calls created after it do not exist; a response created after it is
   missing. When ``as_of`` falls inside a run (a call, response or service call of the message
   is newer than ``as_of``), the run is treated as ``in_progress`` whatever its stored status
   (``completed``, ``failed`` or ``cancelled`` is how it ended, later): at that moment it had
   not finished, its final text did not exist yet, and nothing was compacted against it (the
   compaction runs at the end of a turn, against the final answer).
2. Persistence. ``per-run``: a run that is not completed contributes nothing.
   ``per-service-call``: its rounds are replayed like any other; its final text is replayed when
   stored, except when the run was still in progress at ``as_of`` (see 1). A missing status on
   an assistant message means ``completed``.
3. Calls are sorted by ``(round_index, sequence_index, row_id)`` and grouped by round. A call is
   kept when it has a response at ``as_of`` (``""`` counts) that is inside the freshness window
   (age = ``as_of`` - response time, or call time when the response has none). A round with no
   kept call is skipped.
4. Trailing results: the results of the last replayed round are *trailing* when that
   round is the last stored round of the run, the run has no final text to replay, and no
   service call with a later round index is stored. Nothing in the run consumed them, so with
   ``trim_trailing`` on the round is dropped — calls and results — because a call must never
   go unanswered. This applies in both persistence modes; in ``per-service-call`` mode it is
   exactly what a service-stored history would hold.
5. Ids (``ids.py``) are assigned to kept calls in payload order, after trimming. Tool names the
   providers refuse are mapped to accepted ones (``names.py``), the same in the calls and the
   tool definitions.
6. Compaction (``compaction.py``) against the message's replayed final text, then truncation.
7. Imported runs (``Message.imported``: stored by the import API from a provider message list)
   are what a model was sent. Freshness, trailing-result trimming and compaction decided what
   that list holds before it was sent, so they are not applied again: an imported result is
   never stale (its time is the import's, not the tool's), an imported last round is never
   trailing (the list held its results, so a service call received them) and an imported result
   is not compacted (the list already holds what its author kept). ``as_of``, ids, tool names,
   truncation (which leaves a result already cut to the cap alone) and the budget apply as to
   any other run. This is what makes export → import → export give the same payload.

``next_source_number`` is one more than the largest ``source_number`` in any response that
exists at ``as_of`` (replayed or not — old texts may still cite it), or 0 when there is none.

Empty or whitespace-only user/system messages are skipped (providers reject them); assistant
text is replayed only when it has non-whitespace content.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import groupby
from operator import attrgetter
from typing import Any

from . import compaction, truncation
from .formats import object_schema
from .history import History, Message, ToolCall, ToolDefinition
from .ids import IdAllocator
from .jsonfast import dumps
from .names import tool_name_map
from .options import ReplayOptions, heuristic_tokens
from .units import MESSAGE_OVERHEAD, CallOut, DiagnosticLog, Unit

call_order = attrgetter("round_index", "sequence_index", "row_id")
round_of = attrgetter("round_index")


def age_text(age: float) -> str:
    """A stale result's age as its diagnostic's message says it (whole seconds)."""
    return f"{age:.0f}"


def stale_message(call_id: str, function_name: str, age: str, window: float) -> str:
    """The message of a stale result's diagnostic, ``age`` as ``age_text`` spells it (the
    replay cache writes a cached answer's ages in at each request:
    webapp.services.replay_cache)."""
    return (
        f"The result of call '{call_id}' ({function_name}) is {age} s old, older than the "
        f"{window:g} s freshness window; it is left out so the model calls the tool again."
    )


@dataclass(slots=True)
class Plan:
    """Everything the later stages need: units, fixed parts and bookkeeping."""

    units: list[Unit]
    log: DiagnosticLog
    as_of: datetime | None
    system_prompt: str | None
    tools: list[ToolDefinition]
    fixed_tokens: int
    end_pos: int
    next_source_number: int
    counters: dict[str, Any] = field(default_factory=dict)
    omitted: dict[str, int] = field(default_factory=dict)


def sorted_messages(history: History) -> list[Message]:
    return sorted(history.messages, key=attrgetter("created_at", "row_id"))


def latest_moment(messages: list[Message]) -> datetime | None:
    """The latest timestamp anywhere in the data (the default ``as_of``)."""
    latest: datetime | None = None
    for m in messages:
        if latest is None or m.created_at > latest:
            latest = m.created_at
        for c in m.tool_calls:
            if c.created_at > latest:
                latest = c.created_at
            rc = c.response_created_at
            if rc is not None and rc > latest:
                latest = rc
        for s in m.service_calls:
            if s.created_at is not None and s.created_at > latest:
                latest = s.created_at
    return latest


def tool_definition_tokens(tool: ToolDefinition, count: Callable[[str], int]) -> int:
    """Name, description and schema; a stored schema counts as it is sent (an untyped one with
    its ``"type": "object"``), so a copy imported from the export counts the same."""
    tokens = count(tool.name) + count(tool.description or "")
    if tool.parameters is not None:
        tokens += count(dumps(object_schema(tool.parameters)))
    return tokens


def _has_text(text: str | None) -> bool:
    return text is not None and len(text) > 0 and not text.isspace()


def _looks_like_list(text: str) -> bool:
    first = text[:1]
    return first == "[" or (first.isspace() and text.lstrip()[:1] == "[")


# A kept call on its way to the payload: (call, response at as_of, parsed sources or None).
_Kept = tuple[ToolCall, str, list[dict[str, Any]] | None]


class _Builder:
    def __init__(self, history: History, options: ReplayOptions) -> None:
        self.history = history
        self.options = options
        self.count = options.count_tokens
        self.log = DiagnosticLog()
        self.ids = IdAllocator(options.format)
        self.names = tool_name_map(
            [t.name for t in history.tool_definitions]
            + [c.function_name for m in history.messages for c in m.tool_calls]
        )
        self.units: list[Unit] = []
        self.omitted: dict[str, int] = {}
        self.counters: dict[str, Any] = {
            "calls_total": 0,
            "calls_included": 0,
            "results_compacted": 0,
            "results_truncated": 0,
            "truncated_tokens": 0,
        }
        self.name_tokens: dict[str, int] = {}
        self.max_source = -1
        self.turn = 0
        self.as_of: datetime | None = None

    # -- helpers -----------------------------------------------------------------------------

    def omit(self, reason: str, n: int = 1) -> None:
        if n:
            self.omitted[reason] = self.omitted.get(reason, 0) + n

    def response_at_as_of(self, c: ToolCall) -> str | None:
        response = c.response
        if response is not None:
            rc = c.response_created_at
            if rc is not None and self.as_of is not None and rc > self.as_of:
                return None
        return response

    def sources(self, response: str) -> list[dict[str, Any]] | None:
        """Parse a sources list (if it is one) and note its highest source number."""
        if not _looks_like_list(response):
            return None
        items = compaction.parse_sources(response)
        if items is not None:
            top = max(item["source_number"] for item in items)
            if top > self.max_source:
                self.max_source = top
        return items

    # -- messages ----------------------------------------------------------------------------

    def run(self) -> Plan:
        messages = sorted_messages(self.history)
        self.as_of = self.options.as_of or latest_moment(messages)
        for pos, m in enumerate(messages):
            self.counters["calls_total"] += len(m.tool_calls)
            if self.as_of is not None and m.created_at > self.as_of:
                self.log.add(
                    pos,
                    "after_as_of",
                    "This message was created after the as-of time, so it does not exist yet.",
                    message_id=m.external_id,
                    detail={"created_at": m.created_at.isoformat()},
                )
                self.omit("after_as_of", len(m.tool_calls))
                continue
            if m.role == "assistant":
                self.assistant(pos, m)
            elif m.role in ("user", "system"):
                self.plain(pos, m)
            else:
                self.log.add(
                    pos,
                    "empty_message_skipped",
                    f"Role {m.role!r} is not a conversation role; the message is skipped.",
                    message_id=m.external_id,
                )
        return self.plan(len(messages))

    def plain(self, pos: int, m: Message) -> None:
        if not _has_text(m.content):
            self.log.add(
                pos,
                "empty_message_skipped",
                f"This {m.role} message has no text; providers reject empty messages, "
                "so it is skipped.",
                message_id=m.external_id,
            )
            return
        text = m.content or ""
        if m.role == "user":
            self.turn += 1
        self.units.append(
            Unit(
                kind="user" if m.role == "user" else "system",
                pos=pos,
                message_id=m.external_id,
                turn=self.turn,
                text=text,
                tokens=MESSAGE_OVERHEAD + self.count(text),
            )
        )

    def visible_calls(self, pos: int, m: Message) -> tuple[list[ToolCall], bool]:
        """Calls that exist at ``as_of``, and whether the run had activity after it."""
        as_of = self.as_of
        if as_of is None:
            return list(m.tool_calls), False
        calls: list[ToolCall] = []
        late = False
        for c in m.tool_calls:
            if c.created_at > as_of:
                late = True
                self.log.add(
                    pos,
                    "after_as_of",
                    f"Call '{c.external_id}' ({c.function_name}) was made after the as-of time, "
                    "so it does not exist yet.",
                    message_id=m.external_id,
                    round_index=c.round_index,
                    sequence_index=c.sequence_index,
                    call_row_id=c.row_id,
                    call_id=c.external_id,
                )
                self.omit("after_as_of")
                continue
            calls.append(c)
            rc = c.response_created_at
            if rc is not None and rc > as_of:
                late = True
        if not late:
            late = any(s.created_at is not None and s.created_at > as_of for s in m.service_calls)
        return calls, late

    def assistant(self, pos: int, m: Message) -> None:
        status = m.status or "completed"
        calls, in_progress_at_as_of = self.visible_calls(pos, m)
        effective = "in_progress" if in_progress_at_as_of else status

        if effective != "completed" and self.options.persistence == "per-run":
            for c in calls:
                response = self.response_at_as_of(c)
                if response is not None:
                    self.sources(response)
            why = (
                "was still in progress at the as-of time"
                if in_progress_at_as_of
                else f"ended with status '{status}'"
            )
            self.log.add(
                pos,
                "run_not_completed",
                f"This assistant run {why}; in per-run mode an unfinished run contributes "
                "nothing (no tool calls, no text).",
                message_id=m.external_id,
                detail={"status": effective, "calls": len(calls)},
            )
            self.omit("run_not_completed", len(calls))
            return

        final_text: str | None = m.content if _has_text(m.content) else None
        if final_text is not None and in_progress_at_as_of:
            final_text = None
            self.log.add(
                pos,
                "run_not_completed",
                "This assistant run was still in progress at the as-of time, so its final text "
                "did not exist yet; only its finished rounds are replayed.",
                message_id=m.external_id,
                detail={"status": effective, "calls": len(calls)},
            )
        elif m.content and final_text is None:
            self.log.add(
                pos,
                "empty_message_skipped",
                "The assistant's final text is only whitespace; providers reject it, so it is "
                "not replayed.",
                message_id=m.external_id,
            )

        rounds = self.select_rounds(pos, m, calls) if calls else []
        if rounds and final_text is None and self.options.trim_trailing and not m.imported:
            self.trim_trailing(pos, m, calls, rounds)

        cited = None
        if self.options.compact_sources and final_text is not None and not m.imported:
            cited = compaction.cited_numbers(final_text)
        for round_index, kept in rounds:
            self.emit_round(pos, m, round_index, kept, cited)
        if final_text is not None:
            self.units.append(
                Unit(
                    kind="text",
                    pos=pos,
                    message_id=m.external_id,
                    turn=self.turn,
                    text=final_text,
                    tokens=MESSAGE_OVERHEAD + self.count(final_text),
                )
            )
        elif not calls and not m.content:
            self.log.add(
                pos,
                "empty_message_skipped",
                "This assistant message has neither text nor tool calls; there is nothing to "
                "replay.",
                message_id=m.external_id,
            )

    def select_rounds(
        self, pos: int, m: Message, calls: list[ToolCall]
    ) -> list[tuple[int, list[_Kept]]]:
        """Rules 1, 2 and 4: group by round, keep calls with a fresh response, skip empty rounds."""
        as_of = self.as_of
        window = self.options.freshness_seconds
        if as_of is None or m.imported:
            window = None
        log = self.log
        rounds: list[tuple[int, list[_Kept]]] = []
        for round_index, group in groupby(sorted(calls, key=call_order), key=round_of):
            kept: list[_Kept] = []
            seen = 0
            for c in group:
                seen += 1
                response = c.response
                rc = c.response_created_at
                if response is not None and rc is not None and as_of is not None and rc > as_of:
                    response = None
                if response is None:
                    log.add(
                        pos,
                        "response_missing",
                        f"Call '{c.external_id}' ({c.function_name}) has no response"
                        + (" at the as-of time" if c.response is not None else "")
                        + "; it is left out together with its tool-call entry.",
                        message_id=m.external_id,
                        round_index=round_index,
                        sequence_index=c.sequence_index,
                        call_row_id=c.row_id,
                        call_id=c.external_id,
                    )
                    self.omit("response_missing")
                    continue
                items = self.sources(response)
                if window is not None:
                    age = (as_of - (rc or c.created_at)).total_seconds()  # type: ignore[operator]
                    if age > window:
                        log.add(
                            pos,
                            "stale",
                            stale_message(c.external_id, c.function_name, age_text(age), window),
                            message_id=m.external_id,
                            round_index=round_index,
                            sequence_index=c.sequence_index,
                            call_row_id=c.row_id,
                            call_id=c.external_id,
                            detail={"age_seconds": age, "freshness_seconds": window},
                        )
                        self.omit("stale")
                        continue
                kept.append((c, response, items))
            if kept:
                rounds.append((round_index, kept))
            else:
                log.add(
                    pos,
                    "round_skipped",
                    f"No call of round {round_index} has a usable result, so the whole round is "
                    "skipped.",
                    message_id=m.external_id,
                    round_index=round_index,
                    detail={"calls": seen},
                )
        return rounds

    def trim_trailing(
        self,
        pos: int,
        m: Message,
        calls: list[ToolCall],
        rounds: list[tuple[int, list[_Kept]]],
    ) -> None:
        """Rule 5: drop the last replayed round when nothing in the run consumed its results."""
        as_of = self.as_of
        last_round, last_kept = rounds[-1]
        if last_round != max(c.round_index for c in calls):
            return  # a later round was requested, so a service call received these results
        for s in m.service_calls:
            if s.round_index > last_round and (
                as_of is None or s.created_at is None or s.created_at <= as_of
            ):
                return
        rounds.pop()
        self.log.add(
            pos,
            "trailing_trimmed",
            f"Round {last_round} is the run's last round and its results were never sent to a "
            "later service call; trimming trailing results drops the round (calls and results) "
            "so no call goes unanswered.",
            message_id=m.external_id,
            round_index=last_round,
            detail={"calls": [c.external_id for c, _, _ in last_kept]},
        )
        self.omit("trailing_trimmed", len(last_kept))

    def emit_round(
        self,
        pos: int,
        m: Message,
        round_index: int,
        kept: list[_Kept],
        cited: frozenset[int] | None,
    ) -> None:
        """Rules 3, 6 and 7 for the calls of one replayed round, then the round unit."""
        count = self.count
        name_tokens = self.name_tokens
        assign = self.ids.assign
        conversation_id = self.history.conversation_id
        cap = self.options.result_token_cap
        heuristic = count is heuristic_tokens and MESSAGE_OVERHEAD == 4
        outs: list[CallOut] = []
        tokens = MESSAGE_OVERHEAD
        for c, response, items in kept:
            call_id, change = assign(
                c.external_id, conversation_id, m.external_id, round_index, c.sequence_index
            )
            if change is not None:
                self.log_id_change(pos, m, c, call_id, change)
            if c.redacted:
                self.log_call(
                    pos,
                    m,
                    c,
                    call_id,
                    "redacted",
                    "This result was redacted before storage; the masked text is replayed.",
                )
            result = response
            if items is not None and cited is not None:
                result = self.compact(pos, m, c, call_id, response, items, cited)
            if cap is not None and not (heuristic and len(result) <= cap * 4):
                result = self.truncate(pos, m, c, call_id, result, cap)
            args = c.arguments
            args_json = c.arguments_json
            if args_json is None:
                args_json = "{}" if args is None else dumps(args)
            name = c.function_name
            if self.names and name in self.names:
                name = self.rename_call(pos, m, c, call_id)
            name_cost = name_tokens.get(name)
            if name_cost is None:
                name_cost = name_tokens[name] = count(name)
            if heuristic:  # inlined heuristic_tokens: this loop runs once per replayed call
                tokens += name_cost + (len(args_json) + 3) // 4 + 4 + (len(result) + 3) // 4
            else:
                tokens += name_cost + count(args_json) + MESSAGE_OVERHEAD + count(result)
            outs.append(
                CallOut(
                    c.row_id, call_id, name, args, args_json, result, c.is_error, c.sequence_index
                )
            )
        self.counters["calls_included"] += len(outs)
        # The text the model returned next to the round's calls, replayed before them.
        text = next(
            (s.content for s in m.service_calls if s.round_index == round_index and s.content),
            "",
        )
        if text.strip():
            tokens += count(text)
        else:
            text = ""
        self.units.append(
            Unit(
                kind="round",
                pos=pos,
                message_id=m.external_id,
                turn=self.turn,
                text=text,
                round_index=round_index,
                calls=outs,
                tokens=tokens,
            )
        )

    def log_call(
        self,
        pos: int,
        m: Message,
        c: ToolCall,
        call_id: str,
        kind: str,
        reason: str,
        detail: dict[str, Any] | None = None,
    ) -> None:
        self.log.add(
            pos,
            kind,
            reason,
            message_id=m.external_id,
            round_index=c.round_index,
            sequence_index=c.sequence_index,
            call_row_id=c.row_id,
            call_id=call_id,
            detail=detail,
        )

    def rename_call(self, pos: int, m: Message, c: ToolCall, call_id: str) -> str:
        old = c.function_name
        new = self.names[old]
        self.log_call(
            pos,
            m,
            c,
            call_id,
            "tool_name_renamed",
            f"Tool name {old!r} is not accepted by providers (letters, digits, '_' and '-', at "
            f"most 64 characters); it is sent as '{new}', the same in every call and in the tool "
            "definition.",
            {"old_name": old, "new_name": new},
        )
        return new

    def log_id_change(self, pos: int, m: Message, c: ToolCall, call_id: str, change: str) -> None:
        if change == "generated":
            self.log_call(
                pos,
                m,
                c,
                call_id,
                "id_generated",
                f"Call {c.function_name} had an empty id; it gets the stable id '{call_id}' in "
                "both the call and its result.",
                {"new_id": call_id},
            )
        else:
            self.log_call(
                pos,
                m,
                c,
                c.external_id,
                "id_renamed",
                f"Call id '{c.external_id}' is already used earlier in this payload or is not "
                f"accepted by {self.options.format}; it is renamed to '{call_id}'.",
                {"old_id": c.external_id, "new_id": call_id},
            )

    def compact(
        self,
        pos: int,
        m: Message,
        c: ToolCall,
        call_id: str,
        response: str,
        items: list[dict[str, Any]],
        cited: frozenset[int],
    ) -> str:
        compacted = compaction.compact(items, cited)
        if compacted is None:
            return response
        text, kept_numbers, dropped = compacted
        self.counters["results_compacted"] += 1
        self.log_call(
            pos,
            m,
            c,
            call_id,
            "compacted",
            f"{len(dropped)} of {len(items)} sources in this result were not cited in the "
            "answer and were dropped (numbers are kept as they are).",
            {"kept": kept_numbers, "dropped": dropped},
        )
        return text

    def truncate(
        self, pos: int, m: Message, c: ToolCall, call_id: str, result: str, cap: int
    ) -> str:
        cut = truncation.truncate(result, cap, self.count)
        if cut is None:
            return result
        self.counters["results_truncated"] += 1
        self.counters["truncated_tokens"] += cut.cut_tokens
        self.log_call(
            pos,
            m,
            c,
            call_id,
            "truncated",
            f"This result was {cut.over_tokens} tokens over the {cap}-token cap and was cut; a "
            "notice says how much was cut.",
            {"cut_tokens": cut.cut_tokens, "cap": cap},
        )
        return cut.text

    # -- fixed parts -------------------------------------------------------------------------

    def tools(self) -> list[ToolDefinition]:
        """One definition per name, each under the name its calls are sent with."""
        tools: list[ToolDefinition] = []
        seen: set[str] = set()
        renamed = False
        for tool in self.history.tool_definitions:
            if tool.name in seen:
                self.log.add(
                    -1,
                    "tool_definition_duplicate",
                    f"Tool '{tool.name}' is defined more than once; providers require unique "
                    "names, so only the first definition is sent.",
                    detail={"name": tool.name},
                )
                continue
            seen.add(tool.name)
            new = self.names.get(tool.name)
            if new is not None:
                self.log.add(
                    -1,
                    "tool_name_renamed",
                    f"Tool name {tool.name!r} is not accepted by providers (letters, digits, '_' "
                    f"and '-', at most 64 characters); it is defined as '{new}', the name its "
                    "calls are sent with.",
                    detail={"old_name": tool.name, "new_name": new},
                )
                tool = replace(tool, name=new)
                renamed = True
            tools.append(tool)
        if renamed:
            # Stored definitions are loaded in name order; renamed ones are listed in the order
            # of the names they are sent with, as a copy imported from this export loads them.
            tools.sort(key=attrgetter("name"))
        return tools

    def plan(self, end_pos: int) -> Plan:
        count = self.count
        tools = self.tools()
        system = self.history.system_prompt if _has_text(self.history.system_prompt) else None
        fixed = count(system or "") + sum(tool_definition_tokens(t, count) for t in tools)
        return Plan(
            units=self.units,
            log=self.log,
            as_of=self.as_of,
            system_prompt=system,
            tools=tools,
            fixed_tokens=fixed,
            end_pos=end_pos,
            next_source_number=self.max_source + 1,
            counters=self.counters,
            omitted=self.omitted,
        )


def build_plan(history: History, options: ReplayOptions) -> Plan:
    """Apply rules 1-7 and return the neutral plan (no budget, no rendering yet)."""
    return _Builder(history, options).run()
