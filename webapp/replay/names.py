"""Tool names: sent as stored when providers accept them, else mapped to a name they accept.

OpenAI (Chat Completions and Responses) accepts tool names matching ``^[a-zA-Z0-9_-]{1,64}$``;
Anthropic documents the same characters (its Messages API allows up to 128 characters, the
Claude clients 64). One rule for every format keeps a tool's name the same in all three exports,
so an export imported in one format and exported in another does not rename it again.

A name outside the rule (``"get weather"``, ``"search.v2"``, ``"météo"``, 80 characters) gets
each refused character replaced by ``_`` and is cut to 64 characters. When that name is already
used by a tool whose name is valid, or two refused names end up the same, each of those refused
names gets ``_`` + 8 hex digits of its SHA-256 instead (the base cut to fit), so every distinct
name maps to a distinct one. The mapping depends only on the set of names in the history (tool
definitions and every stored call, replayed or not), so it is the same in the definitions, the
calls, every replay of the same data and every ``as_of``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

TOOL_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_TOOL_NAME_LENGTH = 64
_REFUSED_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_SUFFIX_HEX = 8


def name_is_valid(name: object) -> bool:
    return isinstance(name, str) and TOOL_NAME_RE.fullmatch(name) is not None


def _sanitized(name: str) -> str:
    return _REFUSED_CHAR.sub("_", name)[:MAX_TOOL_NAME_LENGTH] or "tool"


def _suffixed(base: str, name: str, attempt: int) -> str:
    key = name if attempt == 0 else f"{name}|{attempt}"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:_SUFFIX_HEX]
    return f"{base[: MAX_TOOL_NAME_LENGTH - _SUFFIX_HEX - 1]}_{digest}"


def tool_name_map(names: Iterable[str]) -> dict[str, str]:
    """``{refused name: name to send}`` for the refused names among ``names`` (often empty)."""
    distinct = set(names)
    refused = sorted(n for n in distinct if not name_is_valid(n))
    if not refused:
        return {}
    taken = distinct.difference(refused)
    claims: dict[str, list[str]] = {}
    for name in refused:
        claims.setdefault(_sanitized(name), []).append(name)
    mapping: dict[str, str] = {}
    # A sanitized name that no valid name uses and only one refused name claims is used as is;
    # all of those are settled first, so the suffixed names below avoid them too.
    contested: list[tuple[str, str]] = []
    for base, claimants in sorted(claims.items()):
        if len(claimants) == 1 and base not in taken:
            mapping[claimants[0]] = base
        else:
            contested.extend((base, name) for name in claimants)
    taken.update(mapping.values())
    for base, name in contested:
        attempt = 0
        candidate = _suffixed(base, name, attempt)
        while candidate in taken:
            attempt += 1
            candidate = _suffixed(base, name, attempt)
        mapping[name] = candidate
        taken.add(candidate)
    return mapping
