"""`jsonfast.canonical_utf8` must give `canonical`'s bytes (stored digests depend on them) for
any document: lone surrogates, NaN and Infinity, huge numbers, keys of every JSON-able type,
values JSON has no type for (their `str()`), deep nesting; and fail where it fails."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.replay.jsonfast import canonical, canonical_utf8

_chars = st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr))
_text = st.text(alphabet=_chars, max_size=12)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**5000), max_value=10**5000),  # past 4300 digits: refused
    st.floats(),
    _text,
    st.datetimes(),
    st.decimals(),
    st.binary(max_size=4),
)
_key = st.one_of(_text, st.integers(), st.floats(), st.booleans(), st.none())
_values = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_text, inner, max_size=4),
        st.dictionaries(_key, inner, max_size=3),  # mixed key types: sorting may fail
    ),
    max_leaves=25,
)


def _outcome(encode: Any, value: Any) -> Any:
    try:
        return encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        return type(exc)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_the_bytes_of_canonical(value: Any) -> None:
    expected = _outcome(lambda v: canonical(v).encode("utf-8", "surrogatepass"), value)
    assert _outcome(canonical_utf8, value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "\ud800",
        float("nan"),
        [float("inf"), -float("inf")],
        {"b": 1, "a": [{"d": 2, "c": "é\x00\x7f\U0001f600"}]},
        datetime.date(2026, 1, 1),
        decimal.Decimal("1.10"),
        [[[[[[[[[[[1]]]]]]]]]]],
        {1: "int key", "1": "text key"},  # both refuse: keys that do not sort
        {1: "int key", 2.5: "float key", None: 0},
    ],
)
def test_examples(value: Any) -> None:
    expected = _outcome(lambda v: canonical(v).encode("utf-8", "surrogatepass"), value)
    assert _outcome(canonical_utf8, value) == expected


def test_deep_nesting_fails_as_canonical_does() -> None:
    value: Any = 1
    for _ in range(5000):
        value = [value]
    with pytest.raises(RecursionError):
        canonical(value)
    with pytest.raises(RecursionError):
        canonical_utf8(value)
