"""Status badges of a tool call on the timeline: pure functions of the stored call.

The replay engineer's library (``webapp.replay``) owns the exact replay rules; these badges are
the dashboard's quick forecast of them, computed per card without replaying the conversation:

* ``error``: the tool reported an error;
* ``no-response``: no response stored yet (replay leaves the call out);
* ``not-captured``: the agent's OpenTelemetry instrumentation did not record the call's
  arguments and result (content capture off): there is nothing to show or replay, and nothing
  is missing;
* ``stale``: the response is older than the freshness window *now* (channel → project window;
  age measured from the response time, or the call time when the response has none — the same
  rule as ``webapp.replay.build``);
* ``redacted``: redaction rules changed the call before it was stored;
* ``truncated``: the response has more tokens than the replay's per-result cap;
* ``compacted``: the response is a sources list with items the run's final text does not cite.

A call of an imported message (the import API: what a model was sent) is never stale nor
compacted: the replay sends imported runs as they were sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ...queries.records import CallRecord

# The replay library decides what a sources list is and what counts as a citation.
from ...replay.compaction import cited_numbers, parse_sources
from ...sql import CONTENT_NOT_CAPTURED
from ..formatting import span


@dataclass(frozen=True, slots=True)
class Badge:
    kind: str  # CSS modifier and JSON value: error, no-response, stale, redacted, ...
    label: str
    title: str  # the tooltip: why the badge is there


def is_stale(call: CallRecord, now: datetime, window_seconds: int | None) -> bool:
    if window_seconds is None or not call.has_response:
        return False
    answered_at = call.response_created_at or call.created_at
    return (now - answered_at).total_seconds() > window_seconds


def uncited_sources(list_response: str | None, cited: frozenset[int] | None) -> list[int]:
    """Source numbers replay compaction would drop from this response (empty: none).

    ``cited`` is None while the run has no final text: nothing is compacted before the answer
    exists (the replay library's rule).
    """
    if list_response is None or cited is None:
        return []
    items = parse_sources(list_response)
    if items is None:
        return []
    return [item["source_number"] for item in items if item["source_number"] not in cited]


def citations(final_text: str | None) -> frozenset[int] | None:
    if not final_text:
        return None
    return cited_numbers(final_text)


def call_badges(
    call: CallRecord,
    *,
    now: datetime,
    freshness_seconds: int | None,
    token_cap: int | None,
    cited: frozenset[int] | None,
    imported: bool = False,
) -> list[Badge]:
    badges: list[Badge] = []
    if imported:
        freshness_seconds, cited = None, None
    if call.is_error:
        badges.append(Badge("error", "error", "The tool reported an error."))
    not_captured = CONTENT_NOT_CAPTURED in (call.redactions or ())
    if not_captured and not call.has_response:
        badges.append(
            Badge(
                "not-captured",
                "content not captured",
                "The agent's OpenTelemetry instrumentation did not record arguments and results "
                "(content capture is off); replay leaves the call out.",
            )
        )
    elif not call.has_response:
        badges.append(
            Badge("no-response", "no response", "No response stored: replay leaves this out.")
        )
    elif is_stale(call, now, freshness_seconds):
        badges.append(
            Badge(
                "stale",
                "stale now",
                f"Older than the {span(freshness_seconds)} freshness window: replay now omits it "
                "and the model calls the tool again.",
            )
        )
    redactions = [r for r in call.redactions or () if r != CONTENT_NOT_CAPTURED]
    if redactions:
        names = ", ".join(redactions)
        badges.append(Badge("redacted", "redacted", f"Changed before storage by: {names}"))
    if token_cap is not None and (call.response_tokens or 0) > token_cap:
        badges.append(
            Badge(
                "truncated",
                "would be truncated",
                f"{call.response_tokens} tokens: a replay with a per-result cap of {token_cap} "
                "tokens cuts it.",
            )
        )
    dropped = uncited_sources(call.list_response, cited)
    if dropped:
        shown = ", ".join(str(n) for n in dropped[:10]) + ("…" if len(dropped) > 10 else "")
        badges.append(
            Badge(
                "compacted",
                "would be compacted",
                f"Sources not cited in the final answer would be dropped: {shown}",
            )
        )
    return badges
