"""Tool-call ids: generated for empty ids, renamed when duplicated or invalid for the provider.

Ids are derived from stable data (conversation id, message external id, round, sequence), never
from randomness or row ids, so replaying the same data twice — or after a re-import — gives the
same ids. Generated ids look like ``call_`` + 24 hex digits (29 characters), which every
provider accepts.

What each format accepts as a tool-call id:

* ``openai-chat``: at most 40 characters (Chat Completions answers "string too long. Expected a
  string with maximum length 40" for ``tool_calls[].id``);
* ``openai-responses``: at most 64 characters (``call_id``);
* ``anthropic``: ``^[a-zA-Z0-9_-]{1,64}$`` (``tool_use.id``; the API's pattern has no length
  limit, 64 is kept as the conservative one that the Claude clients also apply).

An id that is used a second time in the same payload keeps its first use and is renamed on the
later ones.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

ANTHROPIC_ID_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_ID_LENGTH = {"openai-chat": 40, "openai-responses": 64}


def derive_id(*parts: object) -> str:
    """A stable ``call_<24 hex>`` id from the given parts."""
    key = "|".join(str(p) for p in parts)
    return "call_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


def id_checker(fmt: str) -> Callable[[str], object]:
    """``ok(call_id)``, truthy when the provider behind ``fmt`` accepts ``call_id``."""
    if fmt == "anthropic":
        return ANTHROPIC_ID_RE.fullmatch
    limit = MAX_ID_LENGTH[fmt]
    return lambda call_id: 0 < len(call_id) <= limit


class IdAllocator:
    """Hands out payload-unique ids in payload order."""

    __slots__ = ("_used", "_valid")

    def __init__(self, fmt: str) -> None:
        self._used: set[str] = set()
        self._valid = id_checker(fmt)

    def assign(self, original: str, *parts: object) -> tuple[str, str | None]:
        """Return ``(id, change)`` where change is None, ``"generated"`` or ``"renamed"``.

        ``parts`` identify the call stably (conversation, message, round, sequence).
        """
        if original and original not in self._used and self._valid(original):
            self._used.add(original)
            return original, None
        change = "generated" if not original else "renamed"
        salt = () if not original else (original,)
        candidate = derive_id(*parts, *salt)
        attempt = 0
        while candidate in self._used:
            attempt += 1
            candidate = derive_id(*parts, *salt, attempt)
        self._used.add(candidate)
        return candidate, change
