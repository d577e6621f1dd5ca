"""Tool-execution spans without a call id, matched to the model's calls
(docs/otlp-mapping.md, 'Tool spans without a call id').

Frameworks run the model's tool calls and trace each run, mostly without the call's id
(OpenInference's TOOL spans, Logfire's and CrewAI's, the OpenAI Agents SDK's function spans). Such
a span is the execution of a call of the round when it has the call's name, started inside the
round's window (after the model call ended, before the next one started) and is not already
taken; when the span has arguments they must agree with the call's. Among several, the one
whose arguments agree best, then the earliest. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

Record = dict[str, Any]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def agreement(call: dict[str, Any] | None, span: dict[str, Any] | None) -> int | None:
    """How well a span's arguments agree with the call's: 2 equal (canonical JSON), 1 the span's
    plain text is one of the call's values (OpenInference LangChain sends `"Paris"` for
    `{"city": "Paris"}`), 0 nothing to compare; None when both are objects and differ."""
    if call is None or span is None:
        return 0
    if _canonical(call) == _canonical(span):
        return 2
    raw = span.get("_raw") if set(span) == {"_raw"} else None
    if isinstance(raw, str):
        texts = {v if isinstance(v, str) else _canonical(v) for v in call.values()}
        return 1 if raw in texts or raw == _canonical(call) else 0
    if set(call) == {"_raw"}:
        return 0
    return None


def match(
    part: dict[str, Any],
    pool: Iterable[Record],
    used: set[str],
    window: tuple[int, int | None],
) -> Record | None:
    """The id-less execution span of the model's call `part` in the round `window`
    (start ≥ window[0], and < window[1] unless None), or None."""
    best: Record | None = None
    best_score = -1
    for tool in sorted(pool, key=lambda t: (t["start_ns"], t["span_id"])):
        if tool["span_id"] in used or tool["tool"]["name"] != part["name"]:
            continue
        start, end = window
        if tool["start_ns"] < start or (end is not None and tool["start_ns"] >= end):
            continue
        score = agreement(part.get("arguments"), tool["tool"].get("arguments"))
        if score is not None and score > best_score:
            best, best_score = tool, score
    return best
