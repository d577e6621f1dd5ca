"""The token counter the replay API and pages hand to the replay: stored counts first.

Tokenizing every result on every replay is too slow for long conversations (tiktoken takes about
100 µs per KB: seconds for 10,000 results). Ingestion already counted each result, each
argument object and each message, so :func:`stored_counter` answers from those counts when the
replay asks about a text it sends unchanged, and runs tiktoken only for texts the replay made
(compacted or truncated results, prefixes tried while truncating, the system prompt and tool
definitions). Those few are remembered for the rest of the replay, and the last few thousand
across requests as well, so that changing an option on the preview page does not tokenize the
same compacted results again.

The counts are exact for OpenAI models and an o200k_base estimate for others, as at ingestion
(see ``webapp.tokens``); a row stored without a count is simply tokenized.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from .tokens import count_tokens

COUNTER_NAME = "stored"

# Bounded, so a worker's memory stays flat: texts made by a replay are mostly compacted results
# (a few hundred bytes each) and truncated prefixes (about four characters per capped token).
_tokenize = lru_cache(maxsize=4096)(count_tokens)


def stored_counter(stored: dict[str, int], model: str | None) -> Callable[[str], int]:
    """``count(text)``: the stored count of ``text`` if there is one, else tiktoken's.

    ``stored`` is used as the memo and grows with every new text; pass a dict owned by one
    request (the loader builds a fresh one each time).
    """
    lookup = stored.get

    def count(text: str) -> int:
        tokens = lookup(text)
        if tokens is None:
            tokens = stored[text] = _tokenize(text, model)
        return tokens

    return count
