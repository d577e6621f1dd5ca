"""Opaque keyset cursors: "continue after (sort value, row id)".

A cursor is URL-safe base64 of a small JSON array, so it survives query strings untouched and
nobody is tempted to build one by hand. Decoding checks the shape; a damaged cursor raises
:class:`CursorError` (answered with a 422 naming the ``cursor`` parameter).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Generic, Protocol, TypeVar

from ..replay import jsonfast

SortValue = datetime | int | Decimal | None


class CursorError(ValueError):
    pass


class KeysetRow(Protocol):
    @property
    def id(self) -> int: ...

    @property
    def sort_value(self) -> Any: ...


Row = TypeVar("Row", bound=KeysetRow)


@dataclass(frozen=True)  # not slots: a generic alias sets __orig_class__ on its instances
class KeysetPage(Generic[Row]):
    """One page of a keyset-paged list: its rows, and whether more follow."""

    rows: list[Row]
    has_more: bool

    @property
    def next_cursor(self) -> str | None:
        """Where the next page starts, when there is one."""
        if not (self.has_more and self.rows):
            return None
        last = self.rows[-1]
        return encode(last.sort_value, last.id)


def _encode_value(value: SortValue) -> list[str | None]:
    if value is None:
        return ["n", None]
    if isinstance(value, datetime):
        return ["t", value.astimezone(UTC).isoformat()]
    if isinstance(value, bool):
        raise TypeError("a cursor does not hold booleans")
    if isinstance(value, int):
        return ["i", str(value)]
    if isinstance(value, Decimal):
        return ["d", str(value)]
    raise TypeError(f"cannot put {type(value).__name__} in a cursor")


def _decode_value(kind: object, raw: object) -> SortValue:
    if kind == "n":
        return None
    if not isinstance(raw, str):
        raise CursorError("malformed cursor value")
    try:
        if kind == "t":
            parsed = datetime.fromisoformat(raw)
            if parsed.tzinfo is None:
                raise CursorError("cursor timestamp lacks a time zone")
            return parsed.astimezone(UTC)
        if kind == "i":
            return int(raw)
        if kind == "d":
            return Decimal(raw)
    except (ValueError, InvalidOperation) as exc:
        raise CursorError("malformed cursor value") from exc
    raise CursorError("unknown cursor value type")


def encode(value: SortValue, row_id: int) -> str:
    payload = json.dumps([*_encode_value(value), row_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode(cursor: str) -> tuple[SortValue, int]:
    """``(sort value, row id)`` from :func:`encode`'s output; CursorError if damaged."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = jsonfast.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError) as exc:
        raise CursorError("malformed cursor") from exc
    if not (isinstance(data, list) and len(data) == 3):
        raise CursorError("malformed cursor")
    kind, raw, row_id = data
    if not isinstance(row_id, int) or isinstance(row_id, bool):
        raise CursorError("malformed cursor row id")
    return _decode_value(kind, raw), row_id
