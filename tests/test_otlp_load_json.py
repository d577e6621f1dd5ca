"""`messages.load_json` parses with pydantic-core first and falls back to the standard library:
the value must be the one the standard library's path alone gives (`_load_json_stdlib`, the
reader before the change), for any text, hostile included: deep nesting, lone surrogates
(escaped or raw), huge numbers, NaN and Infinity, a BOM, control characters, near-JSON."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webapp.ingest.otlp.messages import _load_json_stdlib, load_json

LIMIT = 2 * 1024 * 1024


def _same(a: Any, b: Any) -> bool:
    """Equal as values and types (int, float, bool apart; -0.0 apart from 0.0; NaN equal to
    NaN; keys in the same order), iteratively: the values may nest ~1000 levels."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, float):
            if math.isnan(x) or math.isnan(y):
                if not (math.isnan(x) and math.isnan(y)):
                    return False
            elif x != y or math.copysign(1, x) != math.copysign(1, y):
                return False
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif x != y:
            return False
    return True


def _check(text: str) -> None:
    assert _same(load_json(text, LIMIT), _load_json_stdlib(text)), repr(text[:200])


_chars = st.one_of(
    st.characters(),
    st.integers(0xD800, 0xDFFF).map(chr),  # lone surrogates, raw
    st.sampled_from(['"', "\\", "\x00", "\x1f", "\x7f", "\ufeff", "\U0001f600"]),
)
_text = st.text(alphabet=_chars, max_size=20)
_number = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(),  # NaN and Infinity included: the encoder writes NaN, Infinity
    st.from_regex(r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,40})?([eE][+-]?[0-9]{1,4})?", fullmatch=True),
    st.sampled_from(["1e400", "-1e400", "2.4e-324", "-0", "-0.0", "1" * 4300, "1" * 4301]),
)
_scalar = st.one_of(st.none(), st.booleans(), _text, st.integers(), st.floats())
_values = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_values, st.booleans())
def test_encoded_values(value: Any, ascii_only: bool) -> None:
    # ensure_ascii=True escapes lone surrogates as \\udXXX; False keeps them raw.
    _check(json.dumps(value, ensure_ascii=ascii_only))


# Near-JSON and the pieces the two parsers read differently.
_PIECES = [
    "[", "]", "{", "}", ",", ":", " ", "\n", '"a"', '"k"', "true", "false", "null",
    "NaN", "Infinity", "-Infinity", "nan", "inf", '"\\ud800"', '"\\udc00"',
    '"\\ud83d\\ude00"', '"\\ud83d"', '"\\ude00\\ud83d"', '"\\ud800\\u0041"', '"\\u0000"',
    '"\x01"', '"\\x41"', '"\\/"', "\ufeff", "00", "01", "1.", ".5", "+1", "1e",
]  # fmt: skip
_tokens = st.one_of(
    st.sampled_from(_PIECES),
    _number.map(str),
    _text.map(json.dumps),
    _text,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_tokens, max_size=12))
def test_token_soup(tokens: list[str]) -> None:
    _check("".join(tokens))


@settings(max_examples=200, deadline=None)
@given(_number.map(str), st.sampled_from(["{0}", "[{0}]", '{{"a":{0}}}', " {0} "]))
def test_numbers(number: str, template: str) -> None:
    _check(template.format(number))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 1500), st.sampled_from(["[", '{"a":', '[{"b":']), st.booleans())
def test_deep_nesting(depth: int, opener: str, closed: bool) -> None:
    closer = {"[": "]", '{"a":': "}", '[{"b":': "}]"}[opener]
    _check(opener * depth + "1" + (closer * depth if closed else ""))


def test_the_examples_that_differ_between_the_parsers() -> None:
    # Each is read otherwise, or only, by one of them: the result must be the reference's.
    for text in [
        '"\\ud800"', '["\\udc00x"]', '{"\\ud800": 1}', '"\ud800"', '[NaN]', '[1e400]', "\ufeff[1]",
        "1" * 4301, "[" * 300 + "]" * 300, "[" * 5000 + "]" * 5000, '{"a":1,"b":2,"a":3}',
    ]:  # fmt: skip
        _check(text)
    # And what they give: a lone surrogate repaired, NaN refused, 1e400 is infinity.
    assert load_json('["\\ud800"]', LIMIT) == ["\ufffd"]
    assert load_json("[NaN]", LIMIT) is None
    assert load_json("[1e400]", LIMIT) == [math.inf]
    assert load_json('{"a":1,"b":2,"a":3}', LIMIT) == {"a": 3, "b": 2}
