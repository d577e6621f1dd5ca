"""Replay options and the default token counter.

``ReplayOptions`` is what a caller (the preview page, the export endpoint) resolves from the
request, the channel and the project before calling :func:`webapp.replay.replay`. The replay
never looks at the clock: ``as_of=None`` means "the latest moment present in the data", so the
same history and options always give the same payload. A caller that wants "now" passes it.

``freshness_seconds`` defaults to 300 (five minutes); the caller is expected to
replace it with the channel override or the project default, or ``None`` to turn the window off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

Format = Literal["openai-chat", "openai-responses", "anthropic"]
Persistence = Literal["per-run", "per-service-call"]
PruneMode = Literal["fifo", "turns"]

FORMATS: tuple[str, ...] = get_args(Format)
PERSISTENCE_MODES: tuple[str, ...] = get_args(Persistence)
PRUNE_MODES: tuple[str, ...] = get_args(PruneMode)

DEFAULT_FRESHNESS_SECONDS = 300.0


def heuristic_tokens(text: str) -> int:
    """Estimate tokens as one per four characters (at least one for non-empty text).

    Pure and O(1); good enough for budgets and previews. Inject a real tokenizer through
    ``ReplayOptions.count_tokens`` when exact numbers matter.
    """
    return (len(text) + 3) // 4  # == max(1, ceil(len / 4)) for non-empty text, 0 for ""


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to build a replay. See the package docstring for what each rule does."""

    as_of: datetime | None = None
    format: Format = "openai-chat"
    freshness_seconds: float | None = DEFAULT_FRESHNESS_SECONDS
    persistence: Persistence = "per-run"
    trim_trailing: bool = True
    compact_sources: bool = True
    result_token_cap: int | None = None
    context_budget: int | None = None
    prune: PruneMode = "fifo"
    count_tokens: Callable[[str], int] = heuristic_tokens

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {self.format!r}")
        if self.persistence not in PERSISTENCE_MODES:
            raise ValueError(
                f"persistence must be one of {', '.join(PERSISTENCE_MODES)}, "
                f"not {self.persistence!r}"
            )
        if self.prune not in PRUNE_MODES:
            raise ValueError(f"prune must be one of {', '.join(PRUNE_MODES)}, not {self.prune!r}")
        if self.as_of is not None and self.as_of.utcoffset() is None:
            raise ValueError("as_of must be timezone-aware (UTC)")
        if self.freshness_seconds is not None and not self.freshness_seconds >= 0:
            raise ValueError("freshness_seconds must be >= 0 or None")
        if self.result_token_cap is not None and self.result_token_cap < 0:
            raise ValueError("result_token_cap must be >= 0 or None")
        if self.context_budget is not None and self.context_budget < 0:
            raise ValueError("context_budget must be >= 0 or None")
