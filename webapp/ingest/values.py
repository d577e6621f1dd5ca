"""Values as they are stored: compact JSON, text PostgreSQL accepts, token counts."""

from __future__ import annotations

from typing import Any

from ..replay.jsonfast import dumps
from ..tokens import TokenCount, estimate


def compact_json(value: Any) -> str:
    """Compact JSON as models emit it and the replay sends it (``webapp.replay.jsonfast``);
    NaN and Infinity are refused with a ValueError (the caller names the field)."""
    return dumps(value, allow_nan=False)


def clean_text(text: str | None) -> str | None:
    # PostgreSQL cannot store NUL in text. Tool output is kept rather than refused: NUL becomes
    # U+FFFD, the replacement character, on both databases alike.
    if text is not None and "\x00" in text:
        return text.replace("\x00", "\ufffd")
    return text


def clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {clean_json(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    return value


def count_tokens(text: str, model: str | None) -> TokenCount:
    """Token count of a stored text; one place to change how ingestion counts."""
    return estimate(text, model)
