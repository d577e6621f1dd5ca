"""Per-result truncation (seed 004).

A result over ``result_token_cap`` tokens is cut to the cap and gets the notice
``\\n[... truncated N tokens ...]`` appended, where N is how many tokens were cut (tokens of the
whole result minus tokens of the kept prefix). The notice itself is not counted against the
cap, as in the seed's ``ToolResultTruncator``.

The prefix is first guessed as ``cap * 4`` characters, then checked with the injected counter
and shrunk proportionally (a few steps, then a binary search), so any tokenizer works and the
default heuristic needs one count.
"""

from __future__ import annotations

from collections.abc import Callable

_PROPORTIONAL_STEPS = 8


def notice(cut_tokens: int) -> str:
    return f"\n[... truncated {cut_tokens} tokens ...]"


def _longest_prefix(text: str, cap: int, count: Callable[[str], int]) -> tuple[int, int]:
    """Length and token count of a long prefix of ``text`` with at most ``cap`` tokens."""
    keep = min(len(text), cap * 4)
    kept = count(text[:keep])
    steps = 0
    while kept > cap and keep > 0 and steps < _PROPORTIONAL_STEPS:
        keep = max(0, min(keep - 1, keep * cap // kept))
        kept = count(text[:keep])
        steps += 1
    if kept > cap:
        lo, hi = 0, keep  # count(text[:lo]) <= cap is assumed for lo == 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid]) <= cap:
                lo = mid
            else:
                hi = mid - 1
        keep = lo
        kept = count(text[:keep])
    return keep, kept


def truncate(text: str, cap: int, count: Callable[[str], int]) -> tuple[str, int] | None:
    """``(truncated text, tokens cut)``, or None when ``text`` fits within ``cap`` tokens."""
    total = count(text)
    if total <= cap:
        return None
    keep, kept = _longest_prefix(text, cap, count)
    cut = total - kept
    return text[:keep] + notice(cut), cut
