"""The conversation charts: context size per service call, tokens per tool result, cost per
turn. Pure module: a :class:`ConversationContext` (and stored costs) in, :class:`Chart` out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from itertools import accumulate

from ..replay.history import History
from . import figures
from .context import PARTS, ContextBar, ConversationContext
from .records import ServiceCallCost
from .tables import Chart, Column, Table
from .windows import ContextWindow

__all__ = [
    "CONVERSATION_CHARTS",
    "context_chart",
    "result_tokens_chart",
    "turn_cost_chart",
]

# Chart names as they appear in URLs, in page order ("tool-cost" is shared with the project).
CONVERSATION_CHARTS = ("context", "result-tokens", "turn-cost", "tool-cost")


# Reported input within this of the counted context is what the providers' framing explains:
# a few tokens per message (4 in the replay's estimates), and a little for a tokenizer that is
# not the model's own.
FRAMING_LOW, FRAMING_HIGH, FRAMING_TOKENS = 0.95, 1.25, 200


def framing_explains(reported: int, counted: int) -> bool:
    """Whether ``reported`` input tokens are ``counted`` content tokens plus framing."""
    return counted * FRAMING_LOW <= reported <= counted * FRAMING_HIGH + FRAMING_TOKENS


def _gap_note(bars: Sequence[ContextBar]) -> str:
    """What the gap between counted context and reported input is, from the data: framing, or
    (issue 23: reported input 3-6 times the counted context under a caption that called it "a
    few tokens of framing") a context the replay does not account for."""
    first = "Content tokens only (stored counts, else the tokenizer)"
    pairs = [
        (b.reported_input_tokens, b.total)
        for b in bars
        if b.reported_input_tokens is not None and b.total > 0
    ]
    off = [(r, t) for r, t in pairs if not framing_explains(r, t)]
    if not pairs:
        return f"{first}; no service call reported its input to compare with."
    if not off:
        return (
            f"{first}; providers add a few tokens of framing per message, which shows as the "
            "gap to the reported input."
        )
    ratios = [r / t for r, t in off]
    return (
        f"{first}. On {len(off):,} of {len(pairs):,} service calls the reported input is "
        f"{min(ratios):.2g}-{max(ratios):.2g} times the counted context, more than framing "
        "explains: the agent sent a context the replay does not account for (history it keeps "
        "itself, or a prompt it does not report), or reported usage that does not match."
    )


def context_chart(
    ctx: ConversationContext, window: ContextWindow | None, budget: int | None
) -> Chart:
    bars = ctx.bars
    table = Table(
        (
            Column("position", "#"),
            Column("service_call", "Service call", "text"),
            Column("message_id", "Assistant message", "text"),
            Column("round", "Round"),
            Column("model", "Model", "text"),
            *(Column(part, figures.PART_LABELS[part]) for part in PARTS),
            Column("total", "Total"),
            Column("reported_input_tokens", "Reported input"),
        ),
        tuple(
            (
                b.position + 1,
                b.label,
                b.message_id,
                b.round_index,
                b.model,
                *(getattr(b, part) for part in PARTS),
                b.total,
                b.reported_input_tokens,
            )
            for b in bars
        ),
    )
    notes = [
        _gap_note(bars),
        "Earlier runs contribute what the replay keeps at the start of each run (persistence "
        "mode, freshness window, trimming, compaction); the budget is drawn, not applied.",
    ]
    label = None
    if window is not None:
        label = (window.tokens, ctx.model or "model")
        notes.append(f"Context window of {ctx.model}: {window.tokens:,} tokens ({window.source}).")
    elif ctx.model:
        notes.append(f"No known context window for {ctx.model}.")
    figure = figures.context_figure(
        [b.label for b in bars],
        {part: [getattr(b, part) for b in bars] for part in PARTS},
        [b.reported_input_tokens for b in bars],
        label,
        budget,
    )
    return Chart(
        "context",
        "Context size per service call",
        "What each LLM call had in its input, by part, next to the model's context window and "
        "the replay budget.",
        table,
        figures.figure_json(figure),
        tuple(notes),
    )


def _sends_per_result(ctx: ConversationContext) -> dict[int, tuple[int, int]]:
    """Call row id -> (times sent, input tokens caused), as attribution counts them."""
    per_run = [0] * ctx.runs
    for bar in ctx.bars:
        per_run[bar.run] += 1
    before = [0, *accumulate(per_run)]  # bars in runs < r
    out = {}
    for r in ctx.results:
        in_run = per_run[r.run] - 1 - r.call_position
        last = min(r.run + r.later_runs, ctx.runs - 1)
        later = before[last + 1] - before[r.run + 1]
        out[r.call_row_id] = (in_run + later, in_run * r.tokens + later * r.replayed_tokens)
    return out


def result_tokens_chart(ctx: ConversationContext, history: History) -> Chart:
    calls = {c.row_id: (m, c) for m in history.messages for c in m.tool_calls}
    sends = _sends_per_result(ctx)
    rows = []
    for r in ctx.results:
        m, c = calls[r.call_row_id]
        sent, caused = sends[r.call_row_id]
        rows.append(
            (
                f"#{r.run + 1} r{c.round_index}.{c.sequence_index}",
                m.external_id,
                c.external_id,
                r.function_name,
                r.tokens,
                sent,
                caused,
            )
        )
    table = Table(
        (
            Column("result", "Result", "text"),
            Column("message_id", "Assistant message", "text"),
            Column("call_id", "Call id", "text"),
            Column("tool", "Tool", "text"),
            Column("tokens", "Tokens"),
            Column("sends", "Times sent"),
            Column("resent_input_tokens", "Input tokens caused"),
        ),
        tuple(rows),
    )
    figure = figures.result_tokens_figure(
        table.column("result"),
        table.column("tool"),
        table.column("tokens"),
        table.column("resent_input_tokens"),
    )
    return Chart(
        "result-tokens",
        "Tokens per tool result",
        "Size of every tool result in conversation order; the table says how often each was "
        "sent to the model and how many input tokens that caused.",
        table,
        figures.figure_json(figure),
    )


@dataclass(slots=True)
class _TurnTotals:
    service_calls: int = 0
    input_tokens: int = 0
    cost_usd: Decimal = field(default_factory=Decimal)
    unpriced_calls: int = 0


def turn_cost_chart(ctx: ConversationContext, costs: Sequence[ServiceCallCost]) -> Chart:
    """Stored cost and reported tokens of the service calls, per user turn."""
    by_call = {(c.message_row_id, c.round_index): c for c in costs}
    turns: dict[int, _TurnTotals] = {}
    for bar in ctx.bars:
        t = turns.setdefault(bar.turn, _TurnTotals())
        t.service_calls += 1
        t.input_tokens += bar.reported_input_tokens or 0
        stored = by_call.get((bar.message_row_id, bar.round_index))
        if stored is not None and stored.cost_usd is not None:
            t.cost_usd += stored.cost_usd
        else:
            t.unpriced_calls += 1
    table = Table(
        (
            Column("turn", "Turn"),
            Column("service_calls", "Service calls"),
            Column("input_tokens", "Reported input"),
            Column("cost_usd", "Cost", "usd"),
            Column("unpriced_calls", "Without price"),
        ),
        tuple(
            (turn, t.service_calls, t.input_tokens, t.cost_usd, t.unpriced_calls)
            for turn, t in sorted(turns.items())
        ),
    )
    labels = [f"turn {t}" if t else "before the first user message" for t in table.column("turn")]
    figure = figures.turn_cost_figure(
        labels, table.column("cost_usd"), table.column("input_tokens")
    )
    notes = ()
    unpriced = sum(table.column("unpriced_calls"))
    if unpriced:
        notes = (f"{unpriced} service calls have no stored cost (unknown model or no usage).",)
    return Chart(
        "turn-cost",
        "Cost per turn",
        "Stored cost of every service call a user turn caused (all runs that answered it).",
        table,
        figures.figure_json(figure),
        notes,
    )
