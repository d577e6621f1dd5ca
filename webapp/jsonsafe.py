"""Parsing JSON that agents sent. Nesting is limited, and any failure is a ValueError.

Agent content is untrusted, and a page must never fail because of it. `json.loads` recurses
once per nesting level, so `"[" * 5000` raises RecursionError, not ValueError. That once let
one tool result turn every page that showed it into a 500. pydantic-core's parser is already
our request parser. It stops at `MAX_DEPTH` levels with a ValueError, so JSON nested that
deep counts as "not JSON" and is shown and stored as the text it is. Everything built from a
parsed value (pretty-printing, redaction, the replay) then recurses at most `MAX_DEPTH` levels.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

# The nesting depth pydantic-core's parser allows (its fixed recursion limit). JSON nested
# deeper is not parsed. tests/test_jsonsafe.py pins the limit, so a change to it is noticed.
MAX_DEPTH = 200


def loads(text: str | bytes, *, allow_nan: bool = True) -> Any:
    """The value that JSON `text` encodes. Raises ValueError when `text` is not JSON, nests
    deeper than `MAX_DEPTH`, or has a number too long to convert. `allow_nan=False` refuses
    NaN and Infinity too (they are not JSON; PostgreSQL cannot store them)."""
    try:
        return from_json(text, allow_inf_nan=allow_nan)
    except TypeError as exc:  # a str with a lone surrogate, which cannot be UTF-8
        raise ValueError(f"not JSON text: {exc}") from None


def parse_container(text: str | None) -> dict[str, Any] | list[Any] | None:
    """The JSON object or array that `text` holds. None for plain text, malformed or too deep
    JSON, and scalars."""
    if not text:
        return None
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return None  # cheap check first: most text is not JSON
    try:
        value = loads(stripped)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None
