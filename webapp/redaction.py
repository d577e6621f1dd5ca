"""Redaction of tool calls before they are stored (seed 001's persist hook, done server-side).

Pure: no Flask, no database. A project's rules are compiled once (`compile_rules`, cached by
their content) and give, per tool name, a `ToolPolicy` that redacts one call's arguments and
response. Three kinds of rule:

- `mask`: built-in detectors replace secrets and PII in every string value of the arguments and
  in the response text with `[REDACTED:<detector>]`. Detectors: `api_key`, `bearer`, `email`,
  `card` (see `DETECTORS`).
- `redact_paths`: dotted JSON paths (`user.ssn`, `items.*.password`; `*` is any key or list
  index) whose values are replaced with `"[REDACTED]"`, in the arguments and in a response
  that is a JSON document.
- `skip`: the call is not stored at all.

A rule applies to the tools whose name matches its `function_name` glob (`None` = every tool).
The names of the rules that changed a call are returned so the stored call can list them.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from .replay.jsonfast import parse_container

PATH_MASK = "[REDACTED]"
RULE_KINDS = ("mask", "redact_paths", "skip")


def _mask(detector: str) -> str:
    return f"[REDACTED:{detector}]"


# --- Detectors ---------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)

# "Bearer <token>" in headers, logs and curl commands; the scheme word is kept for readability.
_BEARER = re.compile(r"\b(Bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*", re.IGNORECASE)

# Keys with a recognisable shape: OpenAI/Anthropic (sk-...), GitHub, AWS access key ids, Slack,
# Google, Stripe, and Toolscope's own keys (ts_...).
_KNOWN_KEYS = re.compile(
    r"\b(?:"
    r"sk-[A-Za-z0-9_\-]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|ts_[A-Za-z0-9_\-]{40,}"
    r")"
)

# A long random-looking value right after a secret-sounding name: `api_key=...`, `token: ...`,
# `"password": "..."`. Only the value is masked. The name list is deliberately narrow and the
# value must look random (see _looks_random) so ordinary ids (`session_id=42`) stay readable.
_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|access[_-]?key|secret(?:[_-]?key)?|client[_-]?secret|"
    r"(?:access|auth|refresh|id)?[_-]?token|password|passwd|pwd|authorization|private[_-]?key)"
)
_ASSIGNED_SECRET = re.compile(
    rf"(?i)\b({_SECRET_NAME})(\"?'?\s*[:=]\s*\"?'?)([A-Za-z0-9_\-./+=~]{{12,}})"
)
# JSON keys whose string values are secrets whatever they look like.
_ALWAYS_SECRET_KEY = re.compile(r"(?i)(password|passwd|secret|private[_-]?key)")
# JSON keys whose string values are secrets when they look random.
_MAYBE_SECRET_KEY = re.compile(rf"(?i)^{_SECRET_NAME}$")

# Card numbers: 13-19 digits, optionally grouped by single spaces or dashes, starting like a
# real card brand (2-6), and passing the Luhn check. The brand prefix keeps 13-digit
# millisecond timestamps (which start with 1) from being masked.
_CARD = re.compile(r"(?<![\d-])[2-6]\d(?:[ -]?\d){11,17}(?![\d-]|[ -]\d)")


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _is_card(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and _luhn_ok(digits)


def _looks_random(value: str) -> bool:
    """Letters and digits mixed with high character entropy: tokens, not words or counters."""
    if len(value) < 12:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if not (has_digit and has_alpha):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.0


def _sub_email(text: str) -> str:
    return _EMAIL.sub(_mask("email"), text)


def _sub_bearer(text: str) -> str:
    return _BEARER.sub(lambda m: f"{m.group(1)} {_mask('bearer')}", text)


def _sub_api_key(text: str) -> str:
    text = _KNOWN_KEYS.sub(_mask("api_key"), text)

    def assigned(m: re.Match[str]) -> str:
        value = m.group(3)
        if not _looks_random(value) and not _ALWAYS_SECRET_KEY.search(m.group(1)):
            return m.group(0)
        return m.group(1) + m.group(2) + _mask("api_key")

    return _ASSIGNED_SECRET.sub(assigned, text)


def _sub_card(text: str) -> str:
    return _CARD.sub(lambda m: _mask("card") if _is_card(m.group(0)) else m.group(0), text)


@dataclass(frozen=True)
class Detector:
    name: str
    # Cheap test run first; most strings hold no secret and stop here.
    quick: re.Pattern[str]
    substitute: Callable[[str], str]


DETECTORS: dict[str, Detector] = {
    "api_key": Detector(
        "api_key",
        re.compile(
            r"sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox|AIza|_live_|_test_|ts_|"
            rf"(?i:{_SECRET_NAME})"
        ),
        _sub_api_key,
    ),
    "bearer": Detector("bearer", re.compile(r"(?i)bearer\s"), _sub_bearer),
    "email": Detector("email", re.compile(r"@"), _sub_email),
    "card": Detector("card", re.compile(r"\d{4}"), _sub_card),
}


# --- Rules and policies ------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """A stored redaction rule, as plain values (hashable, so compiled rules can be cached)."""

    name: str
    kind: str
    value: tuple[str, ...] = ()
    function_name: str | None = None

    def applies_to(self, tool_name: str) -> bool:
        return self.function_name is None or fnmatch.fnmatchcase(tool_name, self.function_name)


def validate_rule(kind: str, value: Sequence[str]) -> str | None:
    """Why a rule's value is unusable, or None when it is fine."""
    if kind == "mask":
        if not value:
            return f"a mask rule needs at least one detector: {', '.join(DETECTORS)}"
        unknown = [v for v in value if v not in DETECTORS]
        if unknown:
            return f"unknown detector(s) {', '.join(unknown)}; known: {', '.join(DETECTORS)}"
    elif kind == "redact_paths":
        if not value:
            return "a redact_paths rule needs at least one path such as `user.ssn`"
        bad = [p for p in value if "\x00" in p or any(part == "" for part in p.split("."))]
        if bad:
            return f"invalid path(s) {', '.join(map(repr, bad))}; use dotted names like a.b.*.c"
    return None


@dataclass
class Redacted:
    """One call after redaction. `skipped_by` names the skip rule that drops it entirely."""

    arguments: dict[str, Any] | None
    response: str | None
    rule_names: list[str] = field(default_factory=list)
    skipped_by: str | None = None


@dataclass(frozen=True)
class ToolPolicy:
    """The rules that apply to one tool name."""

    skip_rule: str | None = None
    masks: tuple[tuple[str, tuple[Detector, ...]], ...] = ()
    paths: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = ()

    @property
    def is_noop(self) -> bool:
        return self.skip_rule is None and not self.masks and not self.paths

    def apply(self, arguments: dict[str, Any] | None, response: str | None) -> Redacted:
        if self.skip_rule is not None:
            return Redacted(None, None, [self.skip_rule], skipped_by=self.skip_rule)
        names: list[str] = []
        for rule_name, paths in self.paths:
            changed = False
            if arguments is not None:
                arguments, hit = _redact_paths(arguments, paths)
                changed |= hit
            if response is not None:
                response, hit = _redact_response_paths(response, paths)
                changed |= hit
            if changed:
                names.append(rule_name)
        for rule_name, detectors in self.masks:
            changed = False
            if arguments is not None:
                arguments, hit = _mask_value(arguments, detectors, None)
                changed |= hit
            if response is not None:
                response, hit = _mask_response(response, detectors)
                changed |= hit
            if changed:
                names.append(rule_name)
        return Redacted(arguments, response, names)


class CompiledRules:
    """A project's rules, ready to apply; the policy per tool name is computed once."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        self._policies: dict[str, ToolPolicy] = {}

    def policy_for(self, tool_name: str) -> ToolPolicy:
        policy = self._policies.get(tool_name)
        if policy is None:
            policy = self._build(tool_name)
            if len(self._policies) < 10_000:  # bounded: tool names come from agents
                self._policies[tool_name] = policy
        return policy

    def _build(self, tool_name: str) -> ToolPolicy:
        applicable = [r for r in self.rules if r.applies_to(tool_name)]
        skip = next((r.name for r in applicable if r.kind == "skip"), None)
        masks = tuple(
            (r.name, tuple(DETECTORS[v] for v in r.value if v in DETECTORS))
            for r in applicable
            if r.kind == "mask"
        )
        paths = tuple(
            (r.name, tuple(tuple(p.split(".")) for p in r.value))
            for r in applicable
            if r.kind == "redact_paths"
        )
        return ToolPolicy(skip, masks, paths)

    def redact(self, tool_name: str, arguments: dict[str, Any] | None, response: str | None):
        return self.policy_for(tool_name).apply(arguments, response)


NO_RULES = CompiledRules(())


@lru_cache(maxsize=256)
def compile_rules(rules: tuple[Rule, ...]) -> CompiledRules:
    """Compiled rules, cached by content: a request re-reads the rows, not the regexes."""
    return CompiledRules(rules) if rules else NO_RULES


# --- Masking -----------------------------------------------------------------------------------


def mask_text(text: str, detectors: Sequence[Detector]) -> str:
    for detector in detectors:
        if detector.quick.search(text):
            text = detector.substitute(text)
    return text


def _mask_value(value: Any, detectors: Sequence[Detector], key: str | None) -> tuple[Any, bool]:
    """Mask every string (and card-like integer) inside a JSON value; (new value, changed)."""
    if isinstance(value, str):
        masked = _mask_keyed_string(value, detectors, key)
        return masked, masked != value
    if isinstance(value, dict):
        changed = False
        out: dict[str, Any] = {}
        for k, v in value.items():
            out[k], hit = _mask_value(v, detectors, k)
            changed |= hit
        return (out, True) if changed else (value, False)
    if isinstance(value, list):
        changed = False
        items = []
        for v in value:
            new, hit = _mask_value(v, detectors, None)
            items.append(new)
            changed |= hit
        return (items, True) if changed else (value, False)
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and any(d.name == "card" for d in detectors)
        and _is_card_number(value)
    ):
        return _mask("card"), True
    return value, False


def _is_card_number(value: int) -> bool:
    text = str(value)
    return text[0] in "23456" and _is_card(text)


def _mask_keyed_string(value: str, detectors: Sequence[Detector], key: str | None) -> str:
    # A JSON key names what its value is: {"api_key": "..."} has no `api_key=` text to find.
    secret_key = key is not None and (
        _ALWAYS_SECRET_KEY.search(key) or (_MAYBE_SECRET_KEY.match(key) and _looks_random(value))
    )
    if secret_key and value and any(d.name == "api_key" for d in detectors):
        return _mask("api_key")
    return mask_text(value, detectors)


def _mask_response(text: str, detectors: Sequence[Detector]) -> tuple[str, bool]:
    masked = mask_text(text, detectors)
    if masked == text:
        return text, False
    # A JSON response is masked value by value, so the result stays valid JSON (a card number
    # stored as a JSON number would otherwise become bare text).
    document = parse_container(text)
    if document is not None:
        new, hit = _mask_value(document, detectors, None)
        if hit:
            return _dump(new), True
    return masked, True


# --- Paths -------------------------------------------------------------------------------------


def _redact_paths(value: Any, paths: Sequence[tuple[str, ...]]) -> tuple[Any, bool]:
    changed = False
    for path in paths:
        value, hit = _redact_path(value, path)
        changed |= hit
    return value, changed


def _redact_path(value: Any, path: tuple[str, ...]) -> tuple[Any, bool]:
    if not path:
        return PATH_MASK, value != PATH_MASK
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        keys = list(value) if head == "*" else ([head] if head in value else [])
        if not keys:
            return value, False
        out = dict(value)
        changed = False
        for k in keys:
            out[k], hit = _redact_path(value[k], rest)
            changed |= hit
        return (out, True) if changed else (value, False)
    if isinstance(value, list):
        if head == "*":
            indexes = range(len(value))
        elif head.isdigit() and int(head) < len(value):
            indexes = range(int(head), int(head) + 1)
        else:
            return value, False
        items = list(value)
        changed = False
        for i in indexes:
            items[i], hit = _redact_path(value[i], rest)
            changed |= hit
        return (items, True) if changed else (value, False)
    return value, False


def _redact_response_paths(text: str, paths: Sequence[tuple[str, ...]]) -> tuple[str, bool]:
    document = parse_container(text)
    if document is None:
        return text, False
    new, changed = _redact_paths(document, paths)
    return (_dump(new), True) if changed else (text, False)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
