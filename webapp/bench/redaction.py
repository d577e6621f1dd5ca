"""The redaction figures: every detector over adversarial inputs at the size limit, in ms per MiB.

Each input is built to make one detector work hard: a run of 2 million `%` before an address
(the email detector was quadratic on it: 3.4 s for 40,000), URL-encoded text, many `@`, a
domain of a million labels, long digit runs and digit groups, almost-keys, secret names without
values, `Bearer` followed by a megabyte of spaces, and so on. Every detector runs over every
input (an input built against one detector must not trouble another), at
``TOOLSCOPE_MAX_RESULT_BYTES`` (2 MiB by default), the largest result text the API stores. Run
in this process: no database, no HTTP. The figure is the best of a few runs, in milliseconds per
MiB of input; the budget is 50 ms/MiB for each detector's worst input.

The **response** figures run the whole masking of a stored result (all four detectors, as a
`mask` rule applies them) on JSON documents: many small strings, email addresses as object keys,
``\\u0040`` escapes, and nesting past the depth limit.

``tests/test_redaction_linear.py`` checks the growth on the same inputs.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..redaction import DETECTORS, Detector, Rule, compile_rules, mask_text
from ..settings import load as load_settings
from .sections import BenchContext, Figure, section

MIB = 1024 * 1024
BUDGET_MS_PER_MIB = 50.0
MAX_RUNS = 3

ADDRESS = " jane.doe@example.com"
MIXED_LINE = (
    "user jane.doe@example.com paid 4111 1111 1111 1111 with sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2;"
    " Authorization: Bearer eyJhbGciOi.J9abc-def_ghi api_key=9f8e7d6c5b4a39281706\n"
)


@dataclass(frozen=True)
class Case:
    name: str
    text: str


def _fill(unit: str, size: int, head: str = "", tail: str = "") -> str:
    """``head``, then ``unit`` repeated, then ``tail``: ``size`` characters in all."""
    room = size - len(head) - len(tail)
    return head + (unit * (room // len(unit) + 1))[:room] + tail


TEXT_CASES: dict[str, Callable[[int], str]] = {
    "prose": lambda n: _fill("The quick brown fox jumps over the lazy dog at 12:30, 044 668. ", n),
    "mixed secrets": lambda n: _fill(MIXED_LINE, n),
    "email: % run, one address": lambda n: _fill("%", n, tail=ADDRESS),
    "email: URL-encoded text": lambda n: _fill("q%3Dhello%20world%26page%3D2%26", n, tail=ADDRESS),
    "email: many @": lambda n: _fill("a@", n),
    "email: long local parts": lambda n: _fill("a.b-c+d%e_f" * 6 + "@ ", n),
    "email: dotted domain": lambda n: _fill("a.", n, head="x@", tail="1"),
    "email: %40 and \\u0040": lambda n: _fill("a%40b\\u0040", n),
    "card: digit run": lambda n: _fill("4", n),
    "card: digit groups": lambda n: _fill("4111 ", n),
    "card: dash groups": lambda n: _fill("41-", n),
    "card: valid cards": lambda n: _fill("4111 1111 1111 1111, ", n),
    "card: Luhn failures": lambda n: _fill("4111 1111 1111 1112, ", n),
    "api_key: token run": lambda n: _fill("aB3dE5fG7h", n),
    "api_key: almost keys": lambda n: _fill("sk-" + "a1" * 9 + "a ", n),
    "api_key: key prefixes": lambda n: _fill("ghp_ts_AKIAxoxb-", n),
    "api_key: secret names": lambda n: _fill("token=", n),
    "api_key: many assignments": lambda n: _fill("api_key=aB3dE5fG7hJ9kL ", n),
    "api_key: many plain values": lambda n: _fill("Token: abcdefghijklmnopq ", n),
    "api_key: many passwords": lambda n: _fill('"password":"correcthorsebattery",', n),
    "api_key: name, then spaces": lambda n: _fill(" ", n, head="password:", tail="x"),
    "api_key: name, huge value": lambda n: _fill("aB3dE5fG7h", n, head="api_key="),
    "api_key: URL, huge user information": lambda n: _fill("u:p", n, head="https://"),
    "api_key: many URL passwords": lambda n: _fill("s://u:p@h ", n),
    "api_key: many schemes": lambda n: _fill("://:", n),
    "bearer: then spaces": lambda n: _fill(" ", n, head="Bearer", tail="x"),
    "bearer: repeated": lambda n: _fill("Bearer ", n),
    "bearer: huge token": lambda n: _fill("aB3-_.~+/", n, head="Bearer "),
    "bearer: short tokens": lambda n: _fill("Bearer abc1234 ", n),
    "bearer: many tokens": lambda n: _fill("Bearer aB3dE5fG7h ", n),
}


def _json_of_size(size: int, item: Callable[[int], Any], ensure_ascii: bool = False) -> str:
    """A JSON array of ``item(i)`` values, at most ``size`` characters long."""
    items: list[Any] = []
    used = 2  # the brackets
    for i in itertools.count():
        value = item(i)
        used += len(json.dumps(value, ensure_ascii=ensure_ascii)) + 2  # and ", "
        if used > size:
            return json.dumps(items, ensure_ascii=ensure_ascii)
        items.append(value)
    raise AssertionError("unreachable")


def _email_keys(size: int) -> str:
    """A JSON object whose keys are addresses (all of them mask to the same key)."""
    entries: list[str] = []
    used = 2
    for i in itertools.count():
        entry = f'"user{i}@example.com": {i}'
        used += len(entry) + 2
        if used > size:
            break
        entries.append(entry)
    return "{" + ", ".join(entries) + "}"


RESPONSE_CASES: dict[str, Callable[[int], str]] = {
    "JSON: small strings with addresses": lambda n: _json_of_size(
        n, lambda i: ["jane@example.com", "plain", i]
    ),
    "JSON: address keys": _email_keys,
    "JSON: \\u0040 escapes": lambda n: _json_of_size(
        n, lambda i: {"to": f"user{i}@example.com", "note": "grüße"}, ensure_ascii=True
    ),
    "JSON: nested past the depth limit": lambda n: "[" * (n // 2) + "]" * (n // 2),
}


def text_cases(size: int) -> list[Case]:
    return [Case(name, make(size)) for name, make in TEXT_CASES.items()]


def response_cases(size: int) -> list[Case]:
    return [Case(name, make(size)) for name, make in RESPONSE_CASES.items()]


def best_ms(run: Callable[[], Any], runs: int = MAX_RUNS) -> float:
    """The fastest of ``runs`` runs, in CPU milliseconds of this process (other processes on
    the machine slow the wall clock, not this)."""
    best = float("inf")
    for _ in range(runs):
        started = time.process_time()
        run()
        best = min(best, (time.process_time() - started) * 1000)
    return best


def detector_ms_per_mib(
    detector: Detector, cases: Sequence[Case], runs: int = MAX_RUNS
) -> dict[str, float]:
    """ms per MiB of ``detector`` on each case."""
    return {
        case.name: best_ms(lambda c=case: mask_text(c.text, (detector,)), runs)
        * MIB
        / len(case.text)
        for case in cases
    }


def response_ms_per_mib(cases: Sequence[Case], runs: int = MAX_RUNS) -> dict[str, float]:
    """ms per MiB of a `mask` rule with every detector, on each case as a stored result."""
    rules = compile_rules((Rule("all", "mask", tuple(DETECTORS)),))
    return {
        case.name: best_ms(lambda c=case: rules.redact("tool", None, c.text), runs)
        * MIB
        / len(case.text)
        for case in cases
    }


@section(
    "redaction",
    "Redaction: each detector over adversarial inputs at the result size limit (ms per MiB)",
)
def redaction_section(ctx: BenchContext) -> list[Figure]:
    if ctx.target == "postgresql":
        ctx.say("  redaction: no database involved, measured once (see the first target)")
        return []
    size = load_settings()["MAX_RESULT_BYTES"]
    runs = MAX_RUNS if ctx.seconds >= 2 else 1
    ctx.say(f"  redaction: {len(TEXT_CASES)} inputs of {size / MIB:.1f} MiB ...")
    cases = text_cases(size)
    figures = [
        _figure(ctx, f"redaction: {name}", detector_ms_per_mib(detector, cases, runs), size)
        for name, detector in DETECTORS.items()
    ]
    figures.append(
        _figure(
            ctx, "redaction: whole result", response_ms_per_mib(response_cases(size), runs), size
        )
    )
    return figures


def _figure(ctx: BenchContext, label: str, per_case: dict[str, float], size: int) -> Figure:
    worst = max(per_case, key=per_case.__getitem__)
    values = {
        "input_bytes": size,
        "worst_ms_per_mib": round(per_case[worst], 1),
        "worst_input": worst,
        "budget_ms_per_mib": BUDGET_MS_PER_MIB,
        "ms_per_mib": {name: round(ms, 1) for name, ms in per_case.items()},
    }
    over = "" if per_case[worst] <= BUDGET_MS_PER_MIB else "   OVER BUDGET"
    text = (
        f"{per_case[worst]:>7.1f} ms/MiB worst ({worst})"
        f"   median {sorted(per_case.values())[len(per_case) // 2]:.1f} ms/MiB"
        f"   over {len(per_case)} inputs of {size / MIB:.1f} MiB{over}"
    )
    return Figure("redaction", ctx.target, label, values, text)
