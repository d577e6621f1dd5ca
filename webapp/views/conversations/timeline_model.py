"""The conversation timeline as view models: messages, turns, rounds, parallel calls.

Pure functions over the query records (no Flask, no database), so paging, grouping and badges
are tested directly. A *turn* starts at each user message; an assistant message is a *run*:
its calls sorted by (round_index, sequence_index), grouped into rounds (sequential LLM service
calls), each round's calls being the parallel calls of one service call.

Big conversations stay fast because nothing is rendered in full: a page holds at most
``MESSAGES_PER_PAGE`` messages and stops early once ``PAGE_CALL_BUDGET`` calls are shown; a run
shows its first ``CALLS_PER_CHUNK`` calls and loads the rest in further chunks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from itertools import groupby
from typing import Any

from ...ingest.otlp import OWNED_MESSAGE_PREFIX
from ...queries.records import CallRecord, MessageCallSummary, MessageRecord, ServiceCallRecord
from ..highlight import RenderedContent, render_text, short_arguments
from . import badges, gantt

MESSAGES_PER_PAGE = 20
CALLS_PER_CHUNK = 30
PAGE_CALL_BUDGET = 60
# User and assistant texts are folded in the timeline beyond this many characters.
MESSAGE_FOLD_CHARS = 1500


@dataclass(frozen=True, slots=True)
class BadgeContext:
    now: datetime
    freshness_seconds: int | None
    token_cap: int | None


@dataclass(frozen=True, slots=True)
class CallView:
    call: CallRecord
    arguments_summary: str
    badges: list[badges.Badge]
    duration_ms: float | None
    # The call's share of its round's cost (see :func:`cost_shares`), when the round is priced.
    cost_share: float | None = None
    cost_usd: Decimal | None = None


@dataclass(frozen=True, slots=True)
class RoundView:
    index: int
    calls: list[CallView]
    # The round began in an earlier chunk: its first calls are shown above.
    continued: bool = False
    usage: ServiceCallRecord | None = None
    # What the model said and reasoned in this round's service call, when the agent sent it.
    text: RenderedContent | None = field(default=None, metadata={"json": False})
    reasoning: RenderedContent | None = field(default=None, metadata={"json": False})

    @property
    def parallel(self) -> bool:
        return len(self.calls) > 1


@dataclass(frozen=True, slots=True)
class RunView:
    """The tool calls of one assistant message (or one chunk of them)."""

    rounds: list[RoundView]
    # "round.sequence" of the last call shown, when more calls follow; None when complete.
    more_after: str | None
    waterfall: str | None = field(default=None, metadata={"json": False})
    # The figure's height, reserved before Plotly draws it so nothing below jumps.
    waterfall_height: int = field(default=0, metadata={"json": False})
    # The run's time split: LLM service calls and tool calls (wall time), in ms.
    model_ms: float | None = None
    tool_ms: float | None = None
    # Some model time was inferred from the gaps between rounds (no times from the agent).
    model_time_inferred: bool = False


@dataclass(frozen=True, slots=True)
class MessageView:
    message: MessageRecord
    source: str  # where the row came from: "otlp", "import" or "api"
    turn: int | None  # 1-based turn number on user messages
    summary: MessageCallSummary | None
    run: RunView | None
    usage: dict[str, int] | None
    content: RenderedContent = field(metadata={"json": False})


SOURCE_LABELS = {"otlp": "OTLP", "import": "import", "api": "API"}


def message_source(message: MessageRecord) -> str:
    """Where a message came from: OTLP ingestion (its `otel-` ids), the import API, or the
    native and MessageTool APIs."""
    if message.external_id.startswith(OWNED_MESSAGE_PREFIX):
        return "otlp"
    return "import" if message.imported else "api"


def call_duration_ms(call: CallRecord) -> float | None:
    if call.started_at is None or call.ended_at is None:
        return None
    return max(0.0, (call.ended_at - call.started_at).total_seconds() * 1000)


def call_view(
    call: CallRecord, ctx: BadgeContext, cited: frozenset[int] | None, imported: bool = False
) -> CallView:
    return CallView(
        call=call,
        arguments_summary=short_arguments(call.arguments),
        badges=badges.call_badges(
            call,
            now=ctx.now,
            freshness_seconds=ctx.freshness_seconds,
            token_cap=ctx.token_cap,
            cited=cited,
            imported=imported,
        ),
        duration_ms=call_duration_ms(call),
    )


# Round texts are folded beyond this many characters.
ROUND_TEXT_FOLD_CHARS = 600


def cost_shares(
    calls: Sequence[CallView],
    cost: Decimal | None,
    *,
    round_calls: int | None = None,
    round_tokens: int | None = None,
) -> list[CallView]:
    """Each call's share of its round's cost: the round's service call asked for these calls,
    and the tokens it wrote for each call's arguments are that call's part of its output, so
    the cost is split in proportion to them (equally when no call has a token count).

    ``calls`` may be some of the round's calls only (the errors-only view, a chunk of a long
    run): ``round_calls`` and ``round_tokens`` are then the whole round's, so a call has the
    same share whichever view shows it. Without them ``calls`` is the whole round."""
    if cost is None or not calls:
        return list(calls)
    weights = [c.call.arguments_tokens or 0 for c in calls]
    # Never less than what is shown (a count stored between the two reads).
    total = max(sum(weights), round_tokens or 0)
    if total == 0:
        weights, total = [1] * len(calls), max(len(calls), round_calls or 0)
    return [
        replace(c, cost_share=w / total, cost_usd=cost * Decimal(w) / Decimal(total))
        for c, w in zip(calls, weights, strict=True)
    ]


def _text(value: str | None) -> RenderedContent | None:
    return render_text(value, limit=ROUND_TEXT_FOLD_CHARS) if value else None


def group_rounds(
    calls: Sequence[CallView],
    usage: dict[int, ServiceCallRecord] | None = None,
    continued_round: int | None = None,
) -> list[RoundView]:
    """Calls (already sorted) grouped by round, in order; ``continued_round`` marks the round
    that a previous chunk started. A round carries its service call's usage, text, reasoning
    and cost, and each call its share of that cost."""
    usage = usage or {}
    rounds = []
    for index, group in groupby(calls, key=lambda c: c.call.round_index):
        record = usage.get(index)
        continued = index == continued_round
        rounds.append(
            RoundView(
                index=index,
                calls=cost_shares(
                    list(group),
                    record.cost_usd if record else None,
                    round_calls=record.round_calls if record else None,
                    round_tokens=record.round_arguments_tokens if record else None,
                ),
                continued=continued,
                usage=record,
                # A round continued from an earlier chunk showed its text there.
                text=None if continued or not record else _text(record.content),
                reasoning=None if continued or not record else _text(record.reasoning),
            )
        )
    return rounds


def call_key(call: CallRecord) -> str:
    return f"{call.round_index}.{call.sequence_index}"


ANCHOR_KINDS = ("turn", "msg", "round", "call")


@dataclass(frozen=True, slots=True)
class Anchor:
    """A place in a conversation that an address can name (``#turn-12``, ``#msg-<id>``,
    ``#round-<message id>-<round>``, ``#call-<id>``): the element ids of the timeline."""

    kind: str
    turn: int = 0
    message_id: int = 0
    round_index: int = 0
    call_id: int = 0

    @property
    def name(self) -> str:
        if self.kind == "turn":
            return f"turn-{self.turn}"
        if self.kind == "msg":
            return f"msg-{self.message_id}"
        if self.kind == "round":
            return f"round-{self.message_id}-{self.round_index}"
        return f"call-{self.call_id}"


MAX_ANCHOR_NUMBER = 2**63 - 1


def parse_anchor(raw: str) -> Anchor:
    """Inverse of :attr:`Anchor.name`; ValueError when malformed."""
    kind, _, rest = raw.partition("-")
    parts = rest.split("-")
    if kind not in ANCHOR_KINDS or not all(p.isdigit() and len(p) <= 19 for p in parts):
        raise ValueError(raw)
    numbers = [int(p) for p in parts]
    if any(n > MAX_ANCHOR_NUMBER for n in numbers):
        raise ValueError(raw)
    if kind == "round":
        if len(numbers) != 2:
            raise ValueError(raw)
        return Anchor("round", message_id=numbers[0], round_index=numbers[1])
    if len(numbers) != 1:
        raise ValueError(raw)
    if kind == "turn":
        if numbers[0] < 1:
            raise ValueError(raw)
        return Anchor("turn", turn=numbers[0])
    if kind == "msg":
        return Anchor("msg", message_id=numbers[0])
    return Anchor("call", call_id=numbers[0])


def parse_call_key(raw: str) -> tuple[int, int]:
    """Inverse of :func:`call_key`; ValueError when malformed."""
    round_part, _, seq_part = raw.partition(".")
    round_index, sequence_index = int(round_part), int(seq_part)
    if round_index < 0 or sequence_index < 0:
        raise ValueError("negative index")
    return round_index, sequence_index


def run_view(
    message: MessageRecord,
    calls: Sequence[CallRecord],
    *,
    ctx: BadgeContext,
    usage: dict[int, ServiceCallRecord] | None,
    has_more: bool,
    continued_round: int | None = None,
    with_waterfall: bool = True,
) -> RunView:
    cited = badges.citations(message.content)
    views = [call_view(c, ctx, cited, message.imported) for c in calls]
    timing = gantt.run_timing(calls, usage) if with_waterfall else None
    figure = timing.figure if timing else None
    return RunView(
        rounds=group_rounds(views, usage, continued_round),
        more_after=call_key(calls[-1]) if has_more and calls else None,
        waterfall=json.dumps(figure, separators=(",", ":")) if figure else None,
        waterfall_height=figure["layout"]["height"] if figure else 0,
        model_ms=timing.model_ms if timing else None,
        tool_ms=timing.tool_ms if timing else None,
        model_time_inferred=timing.inferred if timing else False,
    )


def usage_totals(usage: dict[int, ServiceCallRecord] | None) -> dict[str, int] | None:
    if not usage:
        return None
    totals = {"input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "service_calls": 0}
    for record in usage.values():
        totals["input_tokens"] += record.input_tokens or 0
        totals["output_tokens"] += record.output_tokens or 0
        totals["cached_tokens"] += record.cached_tokens or 0
        totals["service_calls"] += 1
    return totals


def messages_within_budget(
    messages: Sequence[MessageRecord], calls: dict[int, list[Any]], budget: int
) -> int:
    """How many of ``messages`` one page shows: all, or up to the message whose calls reach
    the call budget (at least one message, so paging always moves forward)."""
    shown = 0
    for position, message in enumerate(messages, start=1):
        shown += len(calls.get(message.id, ()))
        if shown >= budget:
            return position
    return len(messages)


def message_views(
    messages: Sequence[MessageRecord],
    *,
    calls: dict[int, list[CallRecord]],
    summaries: dict[int, MessageCallSummary],
    usage: dict[int, dict[int, ServiceCallRecord]],
    ctx: BadgeContext,
    turns_before: int,
    turn_numbers: dict[int, int] | None = None,
    errors_only: bool = False,
) -> list[MessageView]:
    """Views of a page of messages. Turns are numbered from ``turns_before`` on; in the
    errors-only view (``turn_numbers`` given) each message carries its turn, and a run shows
    only its failed calls, without waterfall."""
    views = []
    turn = turns_before
    for message in messages:
        summary = summaries.get(message.id)
        shown = calls.get(message.id, [])
        message_usage = usage.get(message.id)
        if message.role == "user":
            turn += 1
        run = None
        if shown:
            total = (summary.errors if errors_only else summary.calls) if summary else 0
            run = run_view(
                message,
                shown,
                ctx=ctx,
                usage=message_usage,
                has_more=not errors_only and total > len(shown),
                with_waterfall=not errors_only,
            )
        if turn_numbers is not None:
            shown_turn = turn_numbers.get(message.id) or None
        else:
            shown_turn = turn if message.role == "user" else None
        views.append(
            MessageView(
                message=message,
                source=message_source(message),
                turn=shown_turn,
                summary=summary,
                run=run,
                usage=usage_totals(message_usage),
                content=render_text(message.content, limit=MESSAGE_FOLD_CHARS),
            )
        )
    return views
