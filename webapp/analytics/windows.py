"""Context window (maximum input tokens) of a model, for the context-size chart's limit line.

Pure module. The first source is the ``context_window`` that genai-prices' bundled data records
for the model (the same well-kept database that prices every call, so the window and the price
come from one place and one version). Some entries leave it empty; for those families a small
table below gives the number the provider documents. Anything else is unknown (``None``) and
the chart simply draws no window line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

__all__ = ["ContextWindow", "context_window"]


@dataclass(frozen=True, slots=True)
class ContextWindow:
    tokens: int
    source: str  # "genai-prices <version>" or the documentation the fallback number is from


# Families genai-prices knows without a window (or does not know), matched on the model id's
# last path segment. Sources, as published by each provider:
# - Gemini 2.5 Pro: "Input token limit 1,048,576" (ai.google.dev/gemini-api/docs/models).
# - Llama 3.1 / 3.2 / 3.3 text models: "context length of 128K" = 131,072 tokens (Meta's model
#   cards, github.com/meta-llama/llama-models).
# - Mistral Large 2: 128k context = 131,072 tokens (docs.mistral.ai/getting-started/models).
_FALLBACK: tuple[tuple[re.Pattern[str], int, str], ...] = (
    (re.compile(r"gemini-2\.5-pro"), 1_048_576, "Google Gemini API model docs"),
    (re.compile(r"llama-?3\.[123]"), 131_072, "Meta Llama 3.x model cards"),
    (re.compile(r"mistral-large"), 131_072, "Mistral model docs"),
)


@cache
def _from_genai_prices(model: str, provider: str | None) -> int | None:
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    attempts: list[tuple[str, str | None]] = []
    if provider:
        attempts.append((model, provider))
    attempts.append((model, None))
    prefix, sep, rest = model.partition("/")
    if sep and prefix and rest:  # "openai/gpt-4o"
        attempts += [(rest, prefix), (rest, None)]
    for ref, provider_id in attempts:
        try:
            _provider, info = snapshot.find_provider_model(ref, None, provider_id, None)
        except LookupError:
            continue
        return info.context_window
    return None


def context_window(model: str | None, provider: str | None = None) -> ContextWindow | None:
    """The input-token limit of ``model``, or ``None`` when no source knows it."""
    if not model or not model.strip():
        return None
    from ..pricing import prices_version

    name = model.strip().lower()
    tokens = _from_genai_prices(name, provider.strip().lower() if provider else None)
    if tokens:
        return ContextWindow(tokens, f"genai-prices {prices_version()}")
    last = name.rsplit("/", 1)[-1]
    for pattern, fallback, source in _FALLBACK:
        if pattern.search(last):
            return ContextWindow(fallback, source)
    return None
