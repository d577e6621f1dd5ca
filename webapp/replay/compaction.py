"""Source compaction: drop search results the answer did not cite.

A tool result is a *sources list* when it parses as a non-empty JSON list whose items are all
objects with an integer ``source_number``. Such a result keeps only the items whose number is
cited as ``[sourceN]`` (any letter case) in the final text of the same assistant message.
Numbers are never renumbered, so citations already stored in that text stay valid.

Semantics where unique_toolkit's ``compact_message_tools``, which this follows, is silent:

* A run without final text has cited nothing *yet*; its results are left untouched rather than
  emptied (the toolkit compacts at the end of a turn).
* Lists with a single item lacking an integer ``source_number`` are not sources lists and are
  left alone; so is anything that is not valid JSON, and (a shortcut that keeps large results
  cheap) any text that does not contain ``"source_number"`` literally.
* Only a result that actually lost items is re-serialized (compact separators, keys in their
  stored order, non-ASCII kept); otherwise the stored text is replayed byte for byte.
"""

from __future__ import annotations

import re
from typing import Any

from .jsonfast import dumps, loads

CITATION_RE = re.compile(r"\[source(\d+)\]", re.IGNORECASE)


def cited_numbers(text: str | None) -> frozenset[int]:
    """Source numbers cited as ``[sourceN]`` in ``text``."""
    if not text:
        return frozenset()
    return frozenset(int(n) for n in CITATION_RE.findall(text))


def parse_sources(result: str) -> list[dict[str, Any]] | None:
    """The items of a sources list, or None when ``result`` is not one."""
    stripped = result.lstrip()
    if not stripped.startswith("[") or '"source_number"' not in stripped:
        return None  # cheap checks first: most results are not sources lists
    try:
        items = loads(stripped)
    except ValueError:
        return None
    if not isinstance(items, list) or not items:
        return None
    for item in items:
        if not isinstance(item, dict):
            return None
        number = item.get("source_number")
        if not isinstance(number, int) or isinstance(number, bool):
            return None
    return items


def compact(
    items: list[dict[str, Any]], cited: frozenset[int]
) -> tuple[str, list[int], list[int]] | None:
    """``(text of the cited items, kept numbers, dropped numbers)``; None when all are cited."""
    numbers = [item["source_number"] for item in items]
    dropped = [n for n in numbers if n not in cited]
    if not dropped:
        return None
    kept = [item for item, n in zip(items, numbers, strict=True) if n in cited]
    return dumps(kept), [n for n in numbers if n in cited], dropped
