"""Redaction of tool calls before they are stored: an agent's persist hook, done server-side.

Pure: no Flask, no database. A project's rules are compiled once (`compile_rules`, cached by
their content) and give, per tool name, a `ToolPolicy` that redacts one call's arguments and
response. Three kinds of rule:

- `mask`: built-in detectors replace secrets and PII in every key and string of the arguments
  and in the response text with `[REDACTED:<detector>]`, JSON decoded (see "Masking" below).
  Detectors: `api_key`, `bearer`, `email`, `card` (see `DETECTORS`).
- `redact_paths`: dotted JSON paths (`user.ssn`, `items.*.password`; `*` is any key or list
  index) whose values are replaced with `"[REDACTED]"`, in the arguments and in a response
  that is a JSON document.
- `skip`: the call is not stored at all.

A rule applies to the tools whose name matches its `function_name` glob (`None` = every tool).
The names of the rules that changed a call are returned so the stored call can list them.

Content that is no tool call's (message text, system prompts, titles, OTLP span names and
attributes) gets `CompiledRules.content_policy`: the `mask` rules that name no tool, applied by
`ToolPolicy.mask` to any string or JSON value.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import accumulate, compress, repeat
from typing import Any

from .replay.gc_pause import gc_paused
from .replay.jsonfast import dumps, loads

PATH_MASK = "[REDACTED]"
RULE_KINDS = ("mask", "redact_paths", "skip")


def _mask(detector: str) -> str:
    return f"[REDACTED:{detector}]"


# --- Detectors ---------------------------------------------------------------------------------
#
# Every detector takes time linear in its text, a few tens of milliseconds per MiB at most
# (`toolscope bench --only redaction` measures each on adversarial inputs;
# tests/test_redaction_linear.py checks the growth). What keeps a pattern linear:
#
# - A match may start only where a run of the characters it consumes starts (a lookbehind), so
#   a run that fails is scanned once, not once from each of its characters. The email pattern
#   was quadratic without this: 40,000 `%` before an address took 3.4 s.
# - No quantified part can match the same text in two ways: a domain's labels are split by a
#   literal dot, digit groups by at most one separator, so a failing match backtracks over each
#   character once.
# - Bounded quantifiers where a run may fail late (a card's digits, a domain's labels), and no
#   Python call per match where matches can come by the hundred thousand (cards).
#
# For speed, a pattern begins with a literal or a character class where it can: Python's `re`
# then skips to the candidate characters in C instead of trying the pattern at every position.
# A boundary lookbehind is therefore written after the first character (see _after_first).


def _after_first(alternatives: Iterable[str], not_before: str) -> str:
    """`(?<!not_before)(?:alt|...)`, written so that the pattern starts with literals.

    Each alternative must start with one literal character. The alternatives are grouped by
    it, and the lookbehind comes after it, where it looks at the character before:
    `(?:s(?<!\\w.)(?:k-...|k_live_...)|g(?<!\\w.)(?:h[pousr]_...))`. This makes these patterns
    several times faster on ordinary text.
    """
    rests: dict[str, list[str]] = {}
    for alternative in alternatives:
        rests.setdefault(alternative[0], []).append(alternative[1:])
    return (
        "(?:"
        + "|".join(f"{c}(?<!{not_before}.)(?:{'|'.join(rest)})" for c, rest in rests.items())
        + ")"
    )


# Email addresses. The at sign may also be URL-encoded (`%40`) or escaped as in JSON and
# JavaScript (`\u0040`): such text is not decoded, but an address in it is still one. Local
# parts and domains may hold non-ASCII letters (internationalised addresses).
_LOCAL_CHAR = r"[\w.%+-]"
_EMAIL = re.compile(
    rf"(?<!{_LOCAL_CHAR}){_LOCAL_CHAR}+"  # the whole run before the at sign
    r"(?:@|%40|\\u0040)"
    # Labels, each ending in a dot (at most 126, as in DNS), then a top-level domain.
    r"(?:[\w-]++\.){1,126}[^\W\d_]{2,}"
)

# "Bearer <token>" in headers, logs and curl commands; the scheme word is kept for readability.
# Spaces are taken possessively (`++`): a token cannot start with one, so giving them back one
# by one after a failure would only cost time (a megabyte of spaces, a megabyte of retries).
_BEARER = re.compile(r"([Bb](?<!\w.)(?i:earer))\s++[A-Za-z0-9\-._~+/]{8,}=*")

# Keys with a recognisable shape: OpenAI/Anthropic (sk-...), GitHub, AWS access key ids, Slack,
# Google, Stripe, and Toolscope's own keys (ts_...). None may follow a letter, digit or `_`.
_KNOWN_KEYS = re.compile(
    _after_first(
        [
            r"sk-[A-Za-z0-9_\-]{20,}",
            r"gh[pousr]_[A-Za-z0-9]{30,}",
            r"github_pat_[A-Za-z0-9_]{30,}",
            r"AKIA[0-9A-Z]{16}",
            r"ASIA[0-9A-Z]{16}",
            r"xox[abposr]-[A-Za-z0-9\-]{10,}",
            r"AIza[0-9A-Za-z_\-]{35}",
            r"sk_(?:live|test)_[A-Za-z0-9]{16,}",
            r"rk_(?:live|test)_[A-Za-z0-9]{16,}",
            r"pk_(?:live|test)_[A-Za-z0-9]{16,}",
            r"ts_[A-Za-z0-9_\-]{40,}",
        ],
        r"\w",
    )
)

# A long random-looking value right after a secret-sounding name: `api_key=...`, `token: ...`,
# `"password": "..."`. Only the value is masked. The name list is deliberately narrow, and after
# most names the value must look random (see _looks_random) so ordinary ids (`session_id=42`)
# stay readable; after names that always announce a secret (`password`) any value is masked.
# A name may follow anything but a letter or digit (`x_api_key`, `github_token` count).
_ALWAYS_SECRET_NAMES = (
    "password",
    "passwd",
    "secret(?:[_-]?key)?",
    "client[_-]?secret",
    "private[_-]?key",
)
_SECRET_NAMES = (
    *_ALWAYS_SECRET_NAMES,
    "api[_-]?key",
    "apikey",
    "access[_-]?key",
    "access[_-]?token",
    "auth[_-]?token",
    "refresh[_-]?token",
    "id[_-]?token",
    "token",
    "pwd",
    "authorization",
)
# The names are lower case: they are matched in a lower-cased copy of the text (see _lower;
# case-insensitive matching of many literals is several times slower in `re`).
_SECRET_NAME = _after_first(_SECRET_NAMES, "[a-z0-9]")
_VALUE_CHAR = r"[a-z0-9_\-./+=~]"
# Groups: the name with what joins it to the value (spaces possessive, as in _BEARER), an empty
# group present when the value looks random (a digit and a letter in it, see _looks_random),
# and the value. The whole run is the value either way, so a run that is no secret is passed
# over once, not tried again from each name inside it (`token=token=...`).
_ASSIGNED_SECRET = re.compile(
    rf"({_SECRET_NAME}\"?'?\s*+[:=]\s*+\"?'?)"
    rf"((?={_VALUE_CHAR}*?[0-9])(?={_VALUE_CHAR}*?[a-z]))?({_VALUE_CHAR}{{12,}}+)"
)
# A password in a URL's user information (`https://user:password@host`): only the password is
# masked. A match starts at `://` and its possessive runs stop at `/`, so no character is
# scanned by two attempts (every `://` holds a `/` that ends the run before it).
_URL_PASSWORD = re.compile(r"(://[^\s/?#@:]*+:)[^\s/?#@]++(?=@)")
# JSON keys whose values are secrets whatever they look like: any key holding such a name.
_ALWAYS_SECRET_KEY = re.compile("|".join(_ALWAYS_SECRET_NAMES))
# JSON keys whose string values are secrets when they look random.
_MAYBE_SECRET_KEY = re.compile(rf"{_SECRET_NAME}\Z")
_DIGIT = re.compile("[0-9]")
_LETTER = re.compile("[A-Za-z]")

# Card numbers: 13-19 digits, optionally grouped by single spaces or dashes, starting like a
# real card brand (2-6), and passing the Luhn check. The brand prefix keeps 13-digit
# millisecond timestamps (which start with 1) from being masked. A card ends where its digits
# end; it starts at the start of the number or after a space inside it (`qty 1 4111 1111 ...`).
#
# The pattern runs over the reversed text: a card ends where its number ends, so in reverse
# every number is tried once, from its end, with bounded work (forwards, a long number of
# digit groups is tried again from every group: four times slower). Read backwards it is
# `(?<![0-9-])[2-6][0-9](?:[ -]?[0-9]){11,17}(?![0-9-]|[ -][0-9])`. Digits are ASCII digits.
_CARD_REVERSED = re.compile(
    r"([0-9](?<![0-9-][0-9])(?<![0-9][ -][0-9])"  # a number's last digit (boundary lookbehind)
    r"[ -]?(?:[0-9][ -]?){10,16}[0-9][2-6](?![0-9-]))"
)
_CARD_MASK_REVERSED = _mask("card")[::-1]
_NOT_SEPARATORS = str.maketrans("", "", " -")
# A digit's value, and for every second digit of the Luhn check its double with the digits
# summed (7 -> 14 -> 5), as characters \x00-\x09.
_DIGIT_VALUE = str.maketrans("0123456789", "".join(map(chr, range(10))))
_DOUBLED_VALUE = str.maketrans("0123456789", "".join(chr(int(d)) for d in "0246813579"))
_MULTIPLE_OF_TEN = bytes(int(total % 10 == 0) for total in range(256))


def _is_card(text: str) -> bool:
    digits = text.translate(_NOT_SEPARATORS)
    return 13 <= len(digits) <= 19 and list(_luhn_passes([digits[::-1]])) == [0]


def _looks_random(value: str) -> bool:
    """At least 12 characters mixing digits and letters: tokens, not words or counters."""
    return len(value) >= 12 and bool(_DIGIT.search(value)) and bool(_LETTER.search(value))


@lru_cache(maxsize=1024)
def _always_secret(lowered_name: str) -> bool:
    return _ALWAYS_SECRET_KEY.search(lowered_name) is not None


def _lower(text: str) -> str:
    """Lower case, character for character (positions stay valid in the original text).

    `str.lower` keeps the length of every character but one: the dotted capital I becomes two.
    """
    return text.replace("\u0130", "i").lower()


def _sub_email(text: str) -> str:
    return _EMAIL.sub(_mask("email"), text)


def _sub_bearer(text: str) -> str:
    return _BEARER.sub(rf"\1 {_mask('bearer')}", text)


def _sub_api_key(text: str) -> str:
    text = _KNOWN_KEYS.sub(_mask("api_key"), text)
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\1{_mask('api_key')}", text)
    # text, name and joint, random-looking mark, value, text, ...: all matches at once, as they
    # can come by the hundred thousand
    pieces = _ASSIGNED_SECRET.split(_lower(text))
    secret = [
        mark is not None or _always_secret(name)
        for name, mark in zip(pieces[1::4], pieces[2::4], strict=True)
    ]
    if not any(secret):
        return text
    # Where the values start and end: the lengths of the pieces added up (the lower-cased copy
    # has the text's positions; the marks are empty).
    lengths = [0] * (3 * len(secret) + 1)
    lengths[0::3] = map(len, pieces[0::4])  # the text before
    lengths[1::3] = map(len, pieces[1::4])  # the name and joint
    lengths[2::3] = map(len, pieces[3::4])  # the value
    ends = list(accumulate(lengths))
    starts, stops = compress(ends[1::3], secret), compress(ends[2::3], secret)
    kept = map(slice, [0, *stops], [*starts, len(text)])
    return _mask("api_key").join(map(text.__getitem__, kept))


def _sub_card(text: str) -> str:
    reversed_text = text[::-1]
    pieces = _CARD_REVERSED.split(reversed_text)  # text, number, text, number, ..., text
    passed = list(_luhn_passes(pieces[1::2]))
    if not passed:
        return text
    for index in passed:
        pieces[2 * index + 1] = _CARD_MASK_REVERSED
    return "".join(pieces)[::-1]


def _luhn_passes(reversed_numbers: list[str]) -> Iterator[int]:
    """Which of the numbers (13-19 digits, last digit first, with separators) pass the Luhn
    check, all checked at once: a text can hold 100,000 candidates, and a Python call for each
    would cost more than finding them.

    The digits form a table, one number per row, padded to 19 columns with zeros (which add
    nothing). Each column's digit values (doubled in every second column) are the bytes of one
    big integer; adding the 19 integers adds the rows byte by byte without carries, as no row
    sum exceeds 19 * 9 = 171 < 256. A row passes when its sum is a multiple of ten.
    """
    if not reversed_numbers:
        return
    digits = map(str.translate, reversed_numbers, repeat(_NOT_SEPARATORS))
    table = "".join(map(str.ljust, digits, repeat(19), repeat("0")))
    total = 0
    for column in range(19):
        values = _DOUBLED_VALUE if column % 2 else _DIGIT_VALUE
        total += int.from_bytes(table[column::19].translate(values).encode("latin-1"), "big")
    passes = total.to_bytes(len(reversed_numbers), "big").translate(_MULTIPLE_OF_TEN)
    index = passes.find(1)
    while index != -1:
        yield index
        index = passes.find(1, index + 1)


@dataclass(frozen=True)
class Detector:
    name: str
    # A cheap test run first (true when the text may hold a match); most text stops here.
    quick: Callable[[str], object]
    substitute: Callable[[str], str]


_KNOWN_KEY_QUICK = re.compile(r"sk-|gh[pousr]_|github_pat_|AKIA|ASIA|xox|AIza|_live_|_test_|ts_")
_SECRET_NAME_QUICK = re.compile(_SECRET_NAME)


def _may_hold_api_key(text: str) -> bool:
    return bool(
        _KNOWN_KEY_QUICK.search(text) or "://" in text or _SECRET_NAME_QUICK.search(_lower(text))
    )


DETECTORS: dict[str, Detector] = {
    "api_key": Detector("api_key", _may_hold_api_key, _sub_api_key),
    "bearer": Detector("bearer", re.compile(r"(?i)bearer\s").search, _sub_bearer),
    "email": Detector("email", re.compile(r"@|%40|\\u0040").search, _sub_email),
    "card": Detector("card", re.compile(r"[0-9]{4}").search, _sub_card),
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
        # Parsing and copying a large JSON result makes many objects and no reference cycles.
        with gc_paused():
            return self._apply(arguments, response)

    def mask(self, value: Any) -> tuple[Any, list[str]]:
        """`value` (a string, or any JSON value) with the mask rules applied to every key and
        string in it, as to a call's arguments (a string holding a JSON document is masked as
        one); and the names of the rules that changed it. Path and skip rules do not apply:
        this is for content that is no call's (message text, span attributes). `value` itself
        is not changed."""
        names: list[str] = []
        if not self.masks:
            return value, names
        with gc_paused():
            for rule_name, detectors in self.masks:
                value, hit = _mask_arguments(value, detectors)
                if hit:
                    names.append(rule_name)
        return value, names

    def _apply(self, arguments: dict[str, Any] | None, response: str | None) -> Redacted:
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
                arguments, hit = _mask_arguments(arguments, detectors)
                changed |= hit
            if response is not None:
                response, hit = _mask_result(response, detectors)
                changed |= hit
            if changed:
                names.append(rule_name)
        return Redacted(arguments, response, names)


class CompiledRules:
    """A project's rules, ready to apply; the policy per tool name is computed once."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = tuple(rules)
        self._policies: dict[str, ToolPolicy] = {}
        # Content that is no tool call's (message text, system prompts, titles, span names and
        # attributes): the mask rules that name no tool reach it; path and skip rules do not.
        self.content_policy = ToolPolicy(
            masks=tuple(
                (r.name, tuple(DETECTORS[v] for v in r.value if v in DETECTORS))
                for r in self.rules
                if r.kind == "mask" and r.function_name is None
            )
        )

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
#
# Masking sees what a reader of the stored call would see: JSON decoded, keys as well as values.
# A result that is a JSON document, and any string inside one that is itself a JSON document, is
# parsed; its keys and strings are masked as decoded text and the document is written back
# (compact) only when something changed, so an address written `jane\u0040example.com` inside a
# JSON string is found, and nothing of it is stored, in any encoding. Text that is not a JSON
# document is masked as it is. Documents nested deeper than MAX_JSON_DEPTH are text too.
#
# Masked keys can collide (`{"a@x.io": 1, "b@x.io": 2}`): the first keeps the mask, the next
# get ` #2`, ` #3`, ... appended, so no value is dropped and the JSON stays valid.

MAX_JSON_DEPTH = 100
# Joins the strings of a document so that each detector passes over all of them at once. No
# detector matches NUL or treats it differently from the start or end of a string (it is not a
# word character, digit, space or separator), so every string is masked as if on its own.
_JOIN = "\x00"
_DOCUMENT_START = re.compile(r"\s*[\[{]")


def mask_text(text: str, detectors: Sequence[Detector]) -> str:
    """`text` with what `detectors` find masked, read as plain text."""
    for detector in detectors:
        if detector.quick(text):
            text = detector.substitute(text)
    return text


def _mask_texts(texts: list[str], detectors: Sequence[Detector]) -> list[str]:
    """`mask_text` of each string, with one pass of each detector; `texts` itself when none
    changed."""
    joined = _JOIN.join(texts)
    if joined.count(_JOIN) != max(len(texts) - 1, 0):  # a string holds NUL itself
        masked = [mask_text(text, detectors) for text in texts]
        return texts if masked == texts else masked
    masked_joined = mask_text(joined, detectors)
    return texts if masked_joined == joined else masked_joined.split(_JOIN)


def _mask_result(text: str, detectors: Sequence[Detector]) -> tuple[str, bool]:
    """A result text masked: as a JSON document when it is one, else as plain text."""
    if "\\" not in text and not any(d.quick(text) for d in detectors):
        return text, False  # no escapes: a JSON document's strings are parts of the text
    masked = _mask_document(text, detectors, 0)
    if masked is not None:
        return masked
    masked_text = mask_text(text, detectors)
    return masked_text, masked_text != text


def _mask_document(text: str, detectors: Sequence[Detector], depth: int) -> tuple[str, bool] | None:
    """`text` masked as a JSON document (at `depth` in an enclosing one), or None when it is
    not one or is nested past MAX_JSON_DEPTH."""
    document = _parse_json_document(text)
    if document is None:
        return None
    try:
        masked, changed = _DocumentMasker(detectors, depth).mask(document)
    except _TooDeep:
        return None
    return (dumps(masked), True) if changed else (text, False)


def _mask_arguments(arguments: Any, detectors: Sequence[Detector]) -> tuple[Any, bool]:
    """The arguments masked; parts nested deeper than MAX_JSON_DEPTH are not looked into and
    are replaced whole (the API's JSON parser stops at 200 levels; imports go deeper)."""
    return _DocumentMasker(detectors, 0, replace_too_deep=True).mask(arguments)


class _TooDeep(Exception):
    pass


class _Slot:
    """Where a string of a document goes once all of them have been masked together."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _DocumentMasker:
    """Masks one JSON value: a first walk copies it with each string replaced by a `_Slot` (and
    decides what needs no detector: secret-named keys, card numbers, nested documents), the
    detectors then pass once over all the strings, and a second walk fills the slots."""

    def __init__(
        self, detectors: Sequence[Detector], depth: int, *, replace_too_deep: bool = False
    ) -> None:
        self.detectors = detectors
        self.depth = depth
        self.replace_too_deep = replace_too_deep
        self.api_key = any(d.name == "api_key" for d in detectors)
        self.card = any(d.name == "card" for d in detectors)
        self.texts: list[str] = []
        self.changed = False  # by a decision of the first walk
        self._secret_keys: dict[str, tuple[bool, bool]] = {}

    def mask(self, value: Any) -> tuple[Any, bool]:
        template = self._walk(value, None, self.depth)
        masked = _mask_texts(self.texts, self.detectors) if self.texts else self.texts
        if masked is self.texts and not self.changed:
            return value, False
        return _fill(template, masked), True

    def _walk(self, value: Any, key: Any, depth: int) -> Any:
        # Exact types: these are JSON values as the parser makes them (a bool is not a number).
        kind = type(value)
        if kind is str:
            return self._string(value, key, depth)
        if kind is dict or kind is list:
            if depth >= MAX_JSON_DEPTH:
                if not self.replace_too_deep:
                    raise _TooDeep
                self.changed = True
                return PATH_MASK
            if kind is list:
                return [self._walk(item, None, depth + 1) for item in value]
            return {
                self._slot(k) if type(k) is str else k: self._walk(v, k, depth + 1)
                for k, v in value.items()
            }
        if kind is int or kind is float:
            return self._number(value, key)
        return value

    def _string(self, value: str, key: Any, depth: int) -> Any:
        if key is not None and value and self._secret_value(key, value):
            self.changed = True
            return _mask("api_key")
        first = value[:1]
        if first in ("[", "{") or first.isspace():
            masked = _mask_document(value, self.detectors, depth)
            if masked is not None:
                self.changed |= masked[1]
                return masked[0]
        return self._slot(value)  # plain text, masked with all the others

    def _number(self, value: float, key: Any) -> Any:
        if type(value) is int and -(10**10) < value < 10**11:
            return value  # fewer than 12 characters: neither a card nor a secret
        text = str(value)
        # 13 to 19 digits, starting like a card brand.
        if self.card and 13 <= len(text) <= 19 and text[0] in "23456" and _is_card(text):
            self.changed = True
            return _mask("card")
        # As `"password": 123456789012` would be masked in text.
        if len(text) >= 12 and self._secret_value(key, None):
            self.changed = True
            return _mask("api_key")
        return value

    def _secret_value(self, key: Any, value: str | None) -> bool:
        """Whether `key` names a secret that `value` is (for a number, `None`: whatever it looks
        like). A JSON key names what its value is: {"api_key": "..."} has no `api_key=` to
        find in the text."""
        if not self.api_key or type(key) is not str:
            return False
        kinds = self._secret_keys.get(key)
        if kinds is None:
            lowered = _lower(key)
            always = _always_secret(lowered)
            kinds = always, always or bool(_MAYBE_SECRET_KEY.search(lowered))
            self._secret_keys[key] = kinds
        always, maybe = kinds
        return always or (maybe and value is not None and _looks_random(value))

    def _slot(self, text: str) -> _Slot:
        self.texts.append(text)
        return _Slot(len(self.texts) - 1)


def _fill(template: Any, texts: list[str]) -> Any:
    kind = type(template)
    if kind is _Slot:
        return texts[template.index]
    if kind is list:
        return [_fill(item, texts) for item in template]
    if kind is dict:
        out: dict[Any, Any] = {}
        counters: dict[Any, int] = {}
        for k, v in template.items():
            key = texts[k.index] if type(k) is _Slot else k
            out[_unused_key(key, out, counters)] = _fill(v, texts)
        return out
    return template


def _unused_key(key: Any, taken: dict[Any, Any], counters: dict[Any, int]) -> Any:
    """`key`, or `key #2`, `key #3`, ... when masking made it equal to a key already there."""
    if key not in taken:
        return key
    n = counters.get(key, 1) + 1
    while f"{key} #{n}" in taken:
        n += 1
    counters[key] = n
    return f"{key} #{n}"


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
    document = _parse_json_document(text)
    if document is None:
        return text, False
    new, changed = _redact_paths(document, paths)
    if not changed or not _within_depth(new, MAX_JSON_DEPTH):
        return text, False  # deeper documents are text, to which paths do not apply
    return dumps(new), True


def _parse_json_document(text: str) -> Any:
    """The JSON object or array in `text`, or None when it is not one (or is nested too deep
    for the parser)."""
    if not _DOCUMENT_START.match(text):
        return None
    try:
        return loads(text)
    except ValueError:
        return None


def _within_depth(value: Any, limit: int) -> bool:
    """Whether no object or array in `value` lies more than `limit` levels deep."""
    level = [value]
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return True
    return False
