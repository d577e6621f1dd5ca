"""Compact, deterministic JSON encoding, fast enough to run once per replayed call.

``dumps`` gives the same text as ``json.dumps(obj, ensure_ascii=False, separators=(",", ":"))``
(keys in stored order, non-ASCII kept). It calls the C encoder directly: the standard
``JSONEncoder.encode`` builds a new C encoder on every call, which doubles the cost for the
small argument objects a replay encodes by the thousand.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

_SLOW = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _default(obj: object) -> Any:
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _make_fast() -> Callable[[Any, int], Any] | None:
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has the C accelerator
        return None
    try:
        # markers=None skips the circular-reference check: stored JSON cannot be circular.
        enc = make(
            None, _default, json.encoder.encode_basestring, None, ":", ",", False, False, True
        )
        enc({"probe": [1, "é"]}, 0)
    except Exception:  # pragma: no cover - a future CPython with another signature
        return None
    return enc  # type: ignore[no-any-return]


_FAST = _make_fast()


def dumps(obj: Any) -> str:
    """Compact JSON text of ``obj``."""
    if _FAST is None or isinstance(obj, str):  # pragma: no cover - fallback
        return _SLOW.encode(obj)
    return "".join(_FAST(obj, 0))
