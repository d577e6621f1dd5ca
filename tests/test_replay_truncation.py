"""Rule 7 of the replay, the cut itself (webapp/replay/truncation.py): the kept prefix is the
longest the counter puts within the cap, a token or two short of it at most with a real
tokenizer (or the byte tokens of the one character that does not fit), whatever the characters
per token (issue 23: a guess of four characters a token kept 400 characters, 50 tokens, of a
result cut to 100)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp import tokens
from webapp.replay import truncation
from webapp.replay.options import heuristic_tokens

# Words of very different characters per token: long words, digits, CJK, emoji, JSON.
_UNITS = [
    "internationalization ",
    "a ",
    "x",
    "1234567",
    "中文",
    "🙂",
    '{"id":17,"name":"n"},',
    "\n",
    "  ",
    "éé",
    "representative ",
]
texts = st.lists(st.sampled_from(_UNITS), min_size=1, max_size=400).map("".join) | st.text(
    max_size=600
)


def o200k(text: str) -> int:
    return tokens.count_tokens(text, "gpt-4o")


def words(text: str) -> int:
    return len(text.split())


def check_cut(text: str, cap: int, count, *, short_by: int) -> int:
    """The cut's invariants; the number of prefixes counted."""
    seen: list[int] = []

    def counting(t: str) -> int:
        seen.append(len(t))
        return count(t)

    total = count(text)
    cut = truncation.truncate(text, cap, counting)
    if total <= cap:
        assert cut is None
        return 0
    assert cut is not None
    kept_text, _, notice = cut.text.rpartition("\n")
    assert notice == f"[... truncated {total - cap} tokens ...]"
    assert text.startswith(kept_text)
    kept = count(kept_text)
    assert kept <= cap, "over the cap"
    # A character the tokenizer spells in several byte tokens (an emoji, a rare CJK
    # character) cannot be kept in part.
    next_char = count(text[len(kept_text)])
    assert kept >= cap - max(short_by, next_char), (kept, cap)
    # Longest: one more character goes over the cap.
    assert count(text[: len(kept_text) + 1]) > cap
    assert cut.cut_tokens == total - kept and cut.over_tokens == total - cap
    return len(seen)


@settings(max_examples=300, deadline=None)
@given(text=texts, cap=st.integers(min_value=1, max_value=300))
def test_a_real_tokenizer_keeps_within_a_token_or_two_of_the_cap(text: str, cap: int) -> None:
    counted = check_cut(text, cap, o200k, short_by=2)
    # A handful of interpolation steps, then bisection: logarithmic in the text's length.
    assert counted <= 3 + 6 + math.ceil(math.log2(len(text) + 1))


@settings(max_examples=200, deadline=None)
@given(text=texts, cap=st.integers(min_value=1, max_value=300))
def test_any_counter_gets_exactly_the_cap_when_it_counts_one_by_one(text: str, cap: int) -> None:
    """Counters whose prefix counts grow one at a time (a word counter, the heuristic) reach
    the cap exactly."""
    check_cut(text, cap, words, short_by=0)
    check_cut(text, cap, heuristic_tokens, short_by=0)


def test_twenty_thousand_characters_cut_to_a_hundred_tokens_keep_a_hundred() -> None:
    text = "internationalization " * 1_000  # 21,000 characters, 2,000 o200k tokens
    cut = truncation.truncate(text, 100, o200k)
    assert cut is not None
    kept = cut.text.rpartition("\n")[0]
    assert 98 <= o200k(kept) <= 100 and len(kept) > 1_000
