"""Compact, deterministic JSON encoding, fast enough to run once per replayed call.

``dumps`` gives the same text as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``
(keys in stored order, non-ASCII kept). It calls the C encoder directly: the standard
``JSONEncoder.encode`` builds a new C encoder on every call, which doubles the cost for the
small argument objects a replay encodes by the thousand.

The one compact encoding of the project: ingestion stores and counts argument objects with it
(refusing NaN and Infinity, which are not JSON), and the replay sends the same text, so a count
stored at ingestion is the count of what the replay sends.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any


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
