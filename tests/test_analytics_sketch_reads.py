"""How a read of the roll-ups merges their stored sketches and asks them for percentiles.

The roll-ups' percentiles are DDSketch's: `rollups.quantiles` reads them from the stored bins
directly instead of filling a `DDSketch` bin by bin (a tools page asks for one per tool and
measure). For any bins, and any quantile, the answer is the one `DDSketch.get_quantile_value`
gives for the same counts."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.analytics.rollups import Bins, quantile, quantiles

counts = st.dictionaries(st.integers(-400, 1200), st.integers(-3, 50), max_size=60)
values = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9)


def _bins(pos: dict[int, int], neg: dict[int, int], zero: int) -> Bins:
    bins = Bins()
    bins.pos, bins.neg, bins.zero = dict(pos), dict(neg), zero
    return bins


@settings(max_examples=300, deadline=None)
@given(counts, counts, st.integers(-2, 20), st.lists(st.floats(0, 1), max_size=6))
def test_the_same_answers_as_a_ddsketch_of_the_same_counts(pos, neg, zero, qs) -> None:
    bins = _bins(pos, neg, zero)
    qs = [0.0, 0.5, 0.95, 1.0, *qs]
    sketch = bins.sketch()
    assert quantiles(bins, qs) == [sketch.get_quantile_value(q) for q in qs]


@settings(max_examples=200, deadline=None)
@given(st.lists(values, min_size=1, max_size=300), st.floats(0, 1))
def test_values_added_one_by_one_give_ddsketchs_quantile(data, q) -> None:
    bins = Bins()
    for value in data:
        bins.add(value)
    assert quantile(bins, q) == bins.sketch().get_quantile_value(q)


def test_within_one_percent_of_the_exact_value_and_none_when_empty() -> None:
    data = [float(n) for n in range(1, 1001)]
    bins = Bins()
    for value in data:
        bins.add(value)
    p50, p95 = quantiles(bins, (0.5, 0.95))
    assert p50 is not None and math.isclose(p50, 500.5, rel_tol=0.011)
    assert p95 is not None and math.isclose(p95, 950.05, rel_tol=0.011)
    assert quantiles(Bins(), (0.5,)) == [None]
    assert quantile(bins, 1.5) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(counts, counts, st.integers(-2, 20)), max_size=8))
def test_merging_many_stored_texts_at_once_is_merging_them_one_by_one(rows) -> None:
    texts = [_bins(pos, neg, zero).encode() for pos, neg, zero in rows] + [None, ""]
    expected = Bins()
    for pos, neg, zero in rows:
        expected.merge(_bins(pos, neg, zero))
    merged = _bins({1: 2}, {}, 1)  # what was there before stays
    merged.merge_texts(texts)
    expected.merge(_bins({1: 2}, {}, 1))
    assert merged.encode() == expected.encode()
    assert merged.count == expected.count
