"""`bounds._fits` lets a span row skip measuring its raw part item by item when one JSON text of
it shows that it surely fits: whenever it says so, the exact measure (`_parts_size`) must agree,
so the rows stored are those the exact measure alone gives, whatever the row holds and
whatever the limits."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.ingest.otlp import bounds
from webapp.ingest.otlp.batch import Batch, SpanRow
from webapp.ingest.otlp.bounds import Limits, bound_batch

_chars = st.one_of(
    st.characters(),
    st.integers(0xD800, 0xDFFF).map(chr),  # a lone surrogate: 3 bytes, 1 character
    st.sampled_from(["\U0001f600", "é", '"', "\\", "\x00", "\x7f"]),  # 4 and 2 bytes; escapes
)
_text = st.text(alphabet=_chars, max_size=30)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_value = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)),
    max_leaves=8,
)
_attributes = st.dictionaries(_text, _value, max_size=6)
_event = st.builds(
    lambda name, attributes: {"name": name, "time_ns": 1, "attributes": attributes},
    _text,
    _attributes,
)
_link = st.builds(
    lambda attributes: {"trace_id": "a" * 32, "span_id": "b" * 16, "attributes": attributes},
    _attributes,
)


def _row(attributes: Any, events: Any, links: Any, resource: Any, name: str) -> SpanRow:
    return SpanRow(
        *["0" * 32, "1" * 16, "", name, 1, 0, 0, 0, "", "", "", ""],
        resource=resource,
        attributes=attributes,
        events=events,
        links=links,
        record={"class": "other", "name": name},
        digest="",
    )


# The estimate's worst cases: 4-byte characters only, many short keys.
_wide = st.text(alphabet=st.sampled_from(["\U0001f600", "\U0010ffff"]), max_size=300)
_many = st.dictionaries(st.text(max_size=1), st.one_of(_wide, st.none()), max_size=40)
_rows = st.builds(
    _row,
    st.one_of(_attributes, _many),
    st.lists(_event, max_size=3),
    st.lists(_link, max_size=2),
    _attributes,
    _text,
)


def _parts(row: SpanRow) -> list[tuple[str, Any]]:
    return (
        [(f"attributes.{k}", v) for k, v in row.attributes.items()]
        + [(f"events.{i}", e) for i, e in enumerate(row.events)]
        + [(f"links.{i}", link) for i, link in enumerate(row.links)]
        + [(f"resource.{k}", v) for k, v in row.resource.items()]
    )


@settings(max_examples=150, deadline=None)
@given(_rows)
def test_what_fits_by_the_estimate_fits_by_the_measure(row: SpanRow) -> None:
    text = bounds.dumps([getattr(row, n) for n in bounds._RAW_FIELDS])
    exact = bounds._parts_size(_parts(row))
    # Below the exact size, the estimate never says it fits.
    assert not bounds._fits(text, row, exact - 1)


@settings(max_examples=100, deadline=None)
@given(
    _rows,
    st.integers(4, 400),
    st.integers(0, 9_000),
    st.integers(4, 400),
)
def test_bounded_rows_are_those_of_the_exact_measure(
    row: SpanRow, attribute_bytes: int, raw_bytes: int, result_bytes: int
) -> None:
    limits = Limits(attribute_bytes, raw_bytes, result_bytes)
    fast, exact = Batch(spans=[row]), Batch(spans=[copy.deepcopy(row)])
    bound_batch(fast, limits)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bounds, "_fits", lambda text, row, limit: False)
        bound_batch(exact, limits)
    assert fast == exact


def test_a_row_holding_nan_is_measured_item_by_item() -> None:
    # Not from a decoder (they keep NaN as text), but measured as before all the same.
    row = _row({"a": math.nan, "b": "x" * 9_000}, [], [], {}, "s")
    batch = Batch(spans=[row])
    # Room for "a" (NaN: 3 bytes, its place 16) once the marker's 8,192 are set aside.
    bound_batch(batch, Limits(100_000, 8_192 + 30, 1000))
    assert set(row.attributes) == {"a", bounds.MARKER}
    assert row.attributes[bounds.MARKER] == {"left out": ["attributes.b"]}


@pytest.mark.parametrize(
    "attributes",
    [{"": "\U0001f600" * 300}, {"": "\ud800" * 300}, {str(i): None for i in range(40)}],
)
def test_the_estimate_at_its_worst_cases(attributes: dict[str, Any]) -> None:
    # 4 bytes (3 for a lone surrogate) per character; many parts of a few bytes each.
    row = _row(attributes, [], [], {}, "")
    text = bounds.dumps([getattr(row, n) for n in bounds._RAW_FIELDS])
    assert not bounds._fits(text, row, bounds._parts_size(_parts(row)) - 1)
