"""Every detector takes time linear in its input, on the adversarial inputs of the benchmark.

The email detector was quadratic: 40,000 `%` before an address took 3.4 s, 2 MiB some 40
minutes. These tests measure growth, not speed (the benchmark reports the speed,
`toolscope bench --only redaction`): each input at 32 KiB and at 8 times that, in CPU time of
this process (best of three), so other work on the machine does not count. Linear work grows
8 times; quadratic work 64 times. The bound, 20 times, leaves room for noise both ways. A
quadratic detector fails the first, absolute check within a second instead of running for
minutes.
"""

from __future__ import annotations

import pytest

from webapp.bench.redaction import (
    RESPONSE_CASES,
    TEXT_CASES,
    best_ms,
    response_cases,
    text_cases,
)
from webapp.redaction import DETECTORS, Rule, compile_rules, mask_text

SMALL = 32 * 1024
LARGE = 8 * SMALL
MAX_GROWTH = 20.0
# Quadratic email masking took 580 ms on 32 KiB; linear detectors take a few.
MAX_SMALL_MS = 250.0
# Below this, a timing is mostly noise: smaller times count as this much.
FLOOR_MS = 1.0


def growth(run_small, run_large) -> float:
    small = best_ms(run_small)
    assert small < MAX_SMALL_MS, f"{small:.0f} ms on {SMALL // 1024} KiB"
    return best_ms(run_large) / max(small, FLOOR_MS)


@pytest.mark.parametrize("name", list(DETECTORS))
def test_each_detector_grows_linearly_on_every_adversarial_input(name):
    detector = (DETECTORS[name],)
    slow = {}
    for small, large in zip(text_cases(SMALL), text_cases(LARGE), strict=True):
        ratio = growth(
            lambda s=small: mask_text(s.text, detector), lambda g=large: mask_text(g.text, detector)
        )
        if ratio > MAX_GROWTH:
            slow[small.name] = round(ratio, 1)
    assert slow == {}, f"grew more than {MAX_GROWTH} times for 8 times the input"


def test_masking_a_whole_result_grows_linearly():
    rules = compile_rules((Rule("all", "mask", tuple(DETECTORS)),))
    slow = {}
    for small, large in zip(response_cases(SMALL), response_cases(LARGE), strict=True):
        ratio = growth(
            lambda s=small: rules.redact("tool", None, s.text),
            lambda g=large: rules.redact("tool", None, g.text),
        )
        if ratio > MAX_GROWTH:
            slow[small.name] = round(ratio, 1)
    assert slow == {}


def test_the_inputs_are_the_size_asked_for():
    for case in text_cases(SMALL):
        assert len(case.text) == SMALL, case.name
    for case in response_cases(LARGE):
        assert 0.9 * LARGE <= len(case.text) <= LARGE, case.name
    assert len(TEXT_CASES) >= 20 and len(RESPONSE_CASES) >= 4
