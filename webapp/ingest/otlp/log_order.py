"""The order of a span's GenAI log records (docs/otlp-mapping.md, 'Where messages are read').

Records are read in (time, position in their export request) order. Node stamps them in
milliseconds, so the records of one request share a time, and only their position orders them;
sent one record per request, every position is 0 and that order is lost. The tie is then broken
by the role the record speaks for (system and developer first, then user, assistant, tool,
choices, operation details), then by its content, so that the result never depends on the
order of arrival and a request's system prompt stays at its head. Pure.
"""

from __future__ import annotations

import json
from typing import Any

_RANKS = {"system": 0, "developer": 0, "user": 1, "assistant": 2, "tool": 3}


def log_order(record: dict[str, Any]) -> tuple[int, int, int, str]:
    """The sort key of a normalized log record among its span's records."""
    message = record.get("message")
    if "choice_index" in record:
        rank = 4
    elif isinstance(message, dict):
        rank = _RANKS.get(message.get("role"), 4)
    else:
        rank = 5
    content = json.dumps(
        [record.get("event"), message, record.get("input"), record.get("output")],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return record["time_ns"], record["ordinal"], rank, content
