"""Request bodies as JSON bytes, tolerant of what agents commonly put in tool arguments."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any


def _json_default(value: Any) -> Any:
    """Encode datetimes, pydantic models and sets; anything else as its str()."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def encode(payload: Any) -> bytes:
    return json.dumps(payload, default=_json_default, ensure_ascii=False).encode()
