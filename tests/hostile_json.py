"""Hypothesis strategies for hostile JSON text: what an agent (or an attacker posing as one)
can put in a tool result or in the arguments string of an import.

Each strategy yields *text*. Some of it is JSON nested far past any parser's recursion limit,
some is cut short, some carries numbers or escapes that parsers refuse, and some is ordinary
JSON. Pages, replays and ingestion must treat all of it as data and never answer 500.
"""

from __future__ import annotations

import json

from hypothesis import strategies as st

# Deeper than pydantic-core's limit (200) and than Python's recursion limit (1000).
DEPTHS = st.one_of(st.integers(150, 260), st.integers(900, 6000))


def deep_array(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_object(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def deep_mixed(depth: int) -> str:
    opening = "".join('[{"k":' if i % 2 else "[" for i in range(depth))
    closing = "".join("}]" if i % 2 else "]" for i in reversed(range(depth)))
    return opening + "0" + closing


def sources_list(inner: str) -> str:
    """A search tool's sources list (what the replay compacts) with `inner` as one value."""
    return (
        '[{"source_number": 1, "title": "a", "content": "x"}, '
        f'{{"source_number": 2, "title": "b", "content": {inner}}}]'
    )


_deep = st.one_of(
    DEPTHS.map(deep_array),
    DEPTHS.map(deep_object),
    DEPTHS.map(deep_mixed),
    DEPTHS.map(lambda n: "[" * n),  # cut short
    DEPTHS.map(lambda n: '{"a":[' * n),
)

_odd_scalars = st.sampled_from(
    [
        "1" * 5000,  # longer than Python's int conversion limit (4300 digits)
        "[" + "9" * 4400 + "]",
        "1e999999",
        "[NaN, Infinity, -Infinity]",
        '"\\ud800"',  # an escaped lone surrogate
        '["\\u0000", "\\udfff\\ud800"]',
        "{}",
        "[]",
        '{"a": 1, "a": 2}',
        "[1,]",
        "\ufeff[1]",
    ]
)

_ordinary = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
).map(lambda value: json.dumps(value))

hostile_json_text = st.one_of(
    _deep,
    _deep.map(sources_list),
    _odd_scalars,
    _odd_scalars.map(sources_list),
    _ordinary,
)
