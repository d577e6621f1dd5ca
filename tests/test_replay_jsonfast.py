"""The one parser of agent JSON (webapp.replay.jsonfast.loads): bounded nesting, and every
failure a ValueError."""

from __future__ import annotations

import contextlib
import json

import pytest
from hostile_json import deep_array, deep_object, hostile_json_text
from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.replay import jsonfast


@settings(max_examples=300, deadline=None)
@given(st.one_of(hostile_json_text, st.text()))
def test_any_text_parses_or_is_a_value_error(text):
    with contextlib.suppress(ValueError):
        jsonfast.loads(text)
    value = jsonfast.parse_container(text)
    assert value is None or isinstance(value, dict | list)


@pytest.mark.parametrize("depth", [202, 1000, 5000, 100_000])
def test_json_nested_deeper_than_the_limit_is_not_json(depth):
    for text in (deep_array(depth), deep_object(depth)):
        with pytest.raises(ValueError):
            jsonfast.loads(text)
        assert jsonfast.parse_container(text) is None


def test_the_depth_limit_is_max_depth():
    # Pins pydantic-core's limit: code that walks parsed values relies on it.
    for nested in (deep_array, deep_object):
        assert jsonfast.loads(nested(jsonfast.MAX_DEPTH))
        with pytest.raises(ValueError):
            jsonfast.loads(nested(jsonfast.MAX_DEPTH + 2))


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda children: st.lists(children) | st.dictionaries(st.text(), children),
        max_leaves=30,
    )
)
def test_ordinary_json_parses_as_the_standard_library_does(value):
    text = json.dumps(value)
    assert jsonfast.loads(text) == json.loads(text)


def test_lone_surrogates_and_overlong_numbers_are_not_json():
    for text in ('"\\ud800"', "\ud800", "1" * 5000):
        with pytest.raises(ValueError):
            jsonfast.loads(text)


def test_nan_and_infinity_only_when_allowed():
    assert jsonfast.loads('{"a": Infinity}') == {"a": float("inf")}
    for text in ('{"a": Infinity}', "[NaN]", "-Infinity"):
        with pytest.raises(ValueError):
            jsonfast.loads(text, allow_nan=False)


def test_parse_container_keeps_objects_and_arrays_only():
    assert jsonfast.parse_container('  {"a": 1}') == {"a": 1}
    assert jsonfast.parse_container("[1, 2]") == [1, 2]
    assert jsonfast.parse_container('"text"') is None
    assert jsonfast.parse_container("42") is None
    assert jsonfast.parse_container("{broken") is None
    assert jsonfast.parse_container("") is None
    assert jsonfast.parse_container(None) is None
