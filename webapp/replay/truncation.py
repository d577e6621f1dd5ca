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

The kept prefix is the longest one the injected counter puts within the cap, whatever the
characters per token: it is found by counting prefixes, first where the result's own
characters per token place the cap, then by interpolation between the longest prefix known to
fit and the shortest known not to (a few steps), then by bisection. So any tokenizer works, the
cut is a token or two short of the cap at most, and the default heuristic needs one or two
counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

_INTERPOLATION_STEPS = 6
_NOTICE_RE = re.compile(r"\n\[\.\.\. truncated \d+ tokens \.\.\.\]\Z")


def notice(over_tokens: int) -> str:
    return f"\n[... truncated {over_tokens} tokens ...]"


class Cut(NamedTuple):
    text: str  # the kept prefix and the notice
    cut_tokens: int  # tokens of the result minus tokens of the kept prefix
    over_tokens: int  # tokens of the result minus the cap: the number in the notice


def _longest_prefix(
    text: str, cap: int, total: int, count: Callable[[str], int]
) -> tuple[int, int]:
    """Length and token count of the longest prefix of ``text`` with at most ``cap`` tokens
    (``total`` > ``cap``: the tokens of the whole text). Prefix counts may dip where a token
    merges with the next character, so "longest" is where one more character goes over."""
    lo, lo_tokens = 0, 0  # the longest prefix known to fit (the empty one has no tokens)
    hi, hi_tokens = len(text), total  # the shortest known not to
    steps = 0
    while hi - lo > 1:
        if steps < _INTERPOLATION_STEPS:
            # Where the count crosses cap + 1/2 if tokens grow evenly between lo and hi.
            span = (hi - lo) * (2 * (cap - lo_tokens) + 1) // (2 * (hi_tokens - lo_tokens))
            guess = min(hi - 1, max(lo + 1, lo + span))
            steps += 1
        else:
            guess = (lo + hi) // 2
        tokens = count(text[:guess])
        if tokens <= cap:
            lo, lo_tokens = guess, tokens
        else:
            hi, hi_tokens = guess, tokens
    return lo, lo_tokens


def already_cut(text: str, cap: int, count: Callable[[str], int]) -> bool:
    """Whether ``text`` is a prefix within ``cap`` tokens followed by a truncation notice."""
    found = _NOTICE_RE.search(text)
    return found is not None and count(text[: found.start()]) <= cap


def truncate(text: str, cap: int, count: Callable[[str], int]) -> Cut | None:
    """The cut result, or None when ``text`` fits within ``cap`` tokens or was cut already."""
    total = count(text)
    if total <= cap or already_cut(text, cap, count):
        return None
    keep, kept = _longest_prefix(text, cap, total, count)
    over = total - cap
    return Cut(text[:keep] + notice(over), total - kept, over)
