"""Per-result truncation: a result over the token cap is cut to it, with a notice.

A result over ``result_token_cap`` tokens is cut to the cap and gets the notice
``\\n[... truncated N tokens ...]`` appended, where N is ``tokens - cap``: how many tokens the
result had over the cap, exactly as an agent's ``ToolResultTruncator`` writes it
(``tokens - maxTokens``). With the default counter the kept prefix has exactly ``cap`` tokens,
so N is also the number of tokens cut; a real tokenizer may have to stop a token or two short of
the cap at a token boundary, and the exact number cut is then in the diagnostic's
``cut_tokens`` and the stats' ``truncated_tokens``. The notice itself is not counted against the
cap, as in that truncator.

A result that already ends with such a notice and whose text before it fits the cap is left as
it is: it was cut before (by an earlier replay whose export was imported back, or by an agent
running such a truncator), and cutting it again would only cut the notice.

The prefix is first guessed as ``cap * 4`` characters, then checked with the injected counter
and shrunk proportionally (a few steps, then a binary search), so any tokenizer works and the
default heuristic needs one count.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

_PROPORTIONAL_STEPS = 8
_NOTICE_RE = re.compile(r"\n\[\.\.\. truncated \d+ tokens \.\.\.\]\Z")


def notice(over_tokens: int) -> str:
    return f"\n[... truncated {over_tokens} tokens ...]"


class Cut(NamedTuple):
    text: str  # the kept prefix and the notice
    cut_tokens: int  # tokens of the result minus tokens of the kept prefix
    over_tokens: int  # tokens of the result minus the cap: the number in the notice


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


def already_cut(text: str, cap: int, count: Callable[[str], int]) -> bool:
    """Whether ``text`` is a prefix within ``cap`` tokens followed by a truncation notice."""
    found = _NOTICE_RE.search(text)
    return found is not None and count(text[: found.start()]) <= cap


def truncate(text: str, cap: int, count: Callable[[str], int]) -> Cut | None:
    """The cut result, or None when ``text`` fits within ``cap`` tokens or was cut already."""
    total = count(text)
    if total <= cap or already_cut(text, cap, count):
        return None
    keep, kept = _longest_prefix(text, cap, count)
    over = total - cap
    return Cut(text[:keep] + notice(over), total - kept, over)
