"""The project's JSON: compact, deterministic encoding fast enough to run once per replayed
call, and decoding of agent content with bounded nesting.

``dumps`` gives the same text as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``
(keys in stored order, non-ASCII kept). It calls the C encoder directly: the standard
``JSONEncoder.encode`` builds a new C encoder on every call, which doubles the cost for the
small argument objects a replay encodes by the thousand.

The one compact encoding of the project: ingestion stores and counts argument objects with it
(refusing NaN and Infinity, which are not JSON), and the replay sends the same text, so a count
stored at ingestion is the count of what the replay sends.

``loads`` is the one parser of JSON that agents sent: a tool result, an imported arguments
string, a list cursor. Agent content is untrusted, and a page must never fail because of it.
``json.loads`` recurses once per nesting level, so ``"[" * 5000`` raises RecursionError, not
ValueError. That once let one tool result turn every page that showed it into a 500.
pydantic-core's parser is already our request parser. It stops at ``MAX_DEPTH`` levels with a
ValueError, so JSON nested that deep counts as "not JSON" and is shown and stored as the text
it is. Everything built from a parsed value (pretty-printing, redaction, the replay) then
recurses at most ``MAX_DEPTH`` levels.
"""

from __future__ import annotations

import json
import json.encoder
import operator
import re
from collections.abc import Callable
from typing import Any

import orjson
from pydantic_core import from_json

# The nesting depth pydantic-core's parser allows (its fixed recursion limit). JSON nested
# deeper is not parsed. tests/test_replay_jsonfast.py pins the limit, so a change to it is noticed.
MAX_DEPTH = 200


def _default(obj: object) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _make_fast(allow_nan: bool) -> Callable[[Any, int], Any] | None:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return None
    try:
        # markers=None skips the circular-reference check: stored JSON cannot be circular.
        enc = make(
            None, _default, json.encoder.encode_basestring, None, ":", ",", False, False, allow_nan
        )
        enc({"probe": [1, "é"]}, 0)
    except Exception:  # pragma: no cover - a future CPython with another signature
        return None
    return enc  # type: ignore[no-any-return]


_FAST = {allow_nan: _make_fast(allow_nan) for allow_nan in (True, False)}


def dumps(obj: Any, *, allow_nan: bool = True) -> str:
    """Compact JSON text of ``obj``; with ``allow_nan=False`` NaN and Infinity raise ValueError."""
    fast = _FAST[allow_nan]
    if fast is None or isinstance(obj, str):  # pragma: no cover - fallback
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan)
    return "".join(fast(obj, 0))


def canonical(obj: Any) -> str:
    """Compact JSON of ``obj`` with keys sorted and values JSON has no type for as their
    ``str()``: the text a digest of received data is taken of (OTLP ingestion recognises a
    re-sent span by it), so its bytes must never change, or stored digests stop matching."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _make_canonical() -> Callable[[Any, int], Any] | None:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return None
    # `canonical`'s encoder (json.dumps builds this one on every call), without the circular
    # reference check: its markers would be shared between threads.
    return make(None, str, json.encoder.encode_basestring, None, ":", ",", True, False, True)  # type: ignore[no-any-return]


_CANONICAL = _make_canonical()


def canonical_utf8(obj: Any) -> bytes:
    """``canonical(obj).encode("utf-8", "surrogatepass")``, the bytes a digest is taken of,
    with one encoder for every call: a third faster for the small documents of a span. A
    circular document raises RecursionError instead of ValueError (received data has none).
    tests/test_replay_jsonfast_canonical.py compares it with `canonical`."""
    if _CANONICAL is None:  # pragma: no cover - fallback
        return canonical(obj).encode("utf-8", "surrogatepass")
    return "".join(_CANONICAL(obj, 0)).encode("utf-8", "surrogatepass")


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


# --- Large answers: the standard library's bytes at orjson's speed ----------------------------

# Every string, key or value, encoded as nothing: what is left of the document is its structure
# and its numbers, in the standard library's own spelling. A C callable, so the walk stays in C.
_NO_TEXT = operator.itemgetter(slice(0, 0))
# How the standard library spells a float that orjson spells otherwise: an exponent (1e-05,
# 1e+16; orjson writes 0.00001 and 1e16) and the constants that are not JSON (orjson: null).
# Every other float is spelled alike (tests/test_replay_jsonfast.py compares them).
_SPELLED_OTHERWISE = ("e+", "e-", "NaN", "Infinity")
# What the standard library escapes and orjson does not: DEL and everything beyond ASCII.
_ESCAPED = re.compile(rb"[\x7f-\xff]+")
# Whatever is not a plain str, int, float, bool, None, dict, list or tuple goes to `default`,
# that is to the standard library's path: datetimes, dataclasses and subclasses included.
_ORJSON_OPTIONS = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


# dumps_ascii's default: walk the whole document.
_WHOLE: Any = object()


class _NotPlain(Exception):
    """The document holds a value only the standard library's path encodes as it does."""


def _not_plain(obj: object) -> Any:
    raise _NotPlain


def _make_skeleton() -> Callable[[Any, int], Any] | None:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return None
    # No markers: a circular document ends in RecursionError, and then the standard path.
    return make(None, _not_plain, _NO_TEXT, None, ":", ",", False, False, True)  # type: ignore[no-any-return]


_SKELETON = _make_skeleton()


def _escape(match: re.Match[bytes]) -> bytes:
    # The standard library's own escaping (\\u007f, \\u00e9, surrogate pairs above U+FFFF).
    return json.encoder.encode_basestring_ascii(match.group().decode())[1:-1].encode()


def dumps_ascii(
    obj: Any,
    *,
    default: Callable[[Any], Any] | None = None,
    newline: bool = False,
    walk: Any = _WHOLE,
) -> bytes:
    """``json.dumps(obj, separators=(",", ":"), default=default).encode()`` — byte for byte
    (ASCII only, keys in stored order, NaN as ``NaN``) — in less than half its time for a large
    document (an 11 MB replay: ~40 ms instead of ~85). orjson encodes it, after a walk in C of
    its structure has shown that nothing in it is spelled differently by the two encoders
    (the walk costs more than orjson itself). Anything else (a float with
    an exponent, an integer beyond 64 bits, a lone surrogate, a non-str key, a datetime, a
    subclass) takes the standard library's path, so the bytes are the same either way.
    ``newline=True`` ends the text with a newline, as Flask's ``jsonify`` does, without copying
    it to add one. ``walk``: what the walk looks at instead of ``obj``, from a caller that
    knows the rest of ``obj`` to hold only dicts, lists, None and exact ``str`` (the replay's
    message list, see ``webapp.services.replay_answer.text_only_messages``): orjson spells those
    as the standard library does, up to the escaping done here, so they need no walk."""
    if _SKELETON is not None:
        try:
            skeleton = "".join(_SKELETON(obj if walk is _WHOLE else walk, 0))
            if not any(s in skeleton for s in _SPELLED_OTHERWISE):
                options = _ORJSON_OPTIONS | (orjson.OPT_APPEND_NEWLINE if newline else 0)
                out = orjson.dumps(obj, default=_not_plain, option=options)
                if out.isascii() and b"\x7f" not in out:
                    return out
                return _ESCAPED.sub(_escape, out)
        except (_NotPlain, TypeError, ValueError, RecursionError):
            pass  # orjson.JSONEncodeError is a TypeError
    text = json.dumps(obj, separators=(",", ":"), default=default)
    return (text + "\n" if newline else text).encode()
