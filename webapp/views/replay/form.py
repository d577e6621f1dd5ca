"""What the options form shows: the values of its fields, and the "as of" choices. Pure.

The form is filled from the request's parameters as they were sent (so a value the server
refused is still there to correct), with the defaults of ``ReplayQuery`` for the rest. An ISO
time in ``as_of`` (a pushed URL, a shared link) shows as the custom choice with that time;
seconds in ``freshness`` as the custom choice with that number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC

from ...replay import History, turn_starts
from ...replay.export import ReplayQuery, parse_time

# How much of a turn's user message its "as of" choice quotes.
QUOTE_CHARS = 60

_TRUE = {"1", "true", "on", "yes", "t", "y"}
_FALSE = {"0", "false", "off", "no", "f", "n"}


@dataclass(frozen=True, slots=True)
class Choice:
    value: str
    label: str


@dataclass(frozen=True, slots=True)
class FormState:
    values: dict[str, str]  # select and input values by parameter name (without prefix)
    as_of: str  # "now", "turn:<n>" or "custom"
    as_of_custom: str  # for <input type="datetime-local">: YYYY-MM-DDTHH:MM:SS, UTC
    freshness: str  # "default", "off" or "custom"
    freshness_custom: str


def _default(name: str) -> str:
    value = ReplayQuery.model_fields[name].default
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _flag(raw: str) -> str:
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return "true"
    if lowered in _FALSE:
        return "false"
    return raw


def _local_time(raw: str) -> str:
    try:
        value = parse_time(raw)
    except ValueError:
        return ""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds")


def form_state(params: Mapping[str, str], *, prefix: str = "") -> FormState:
    def get(name: str) -> str:
        return params.get(prefix + name, "")

    values = {}
    for name in ("format", "persistence", "prune", "result_token_cap", "context_budget"):
        values[name] = get(name) or _default(name)
    for name in ("trim_trailing", "compact_sources"):
        values[name] = _flag(get(name)) if get(name) else _default(name)

    as_of, as_of_custom = get("as_of").strip() or "now", get("as_of_custom")
    if as_of != "now" and not as_of.startswith("turn:") and as_of != "custom":
        as_of, as_of_custom = "custom", _local_time(as_of)
    freshness, freshness_custom = get("freshness").strip() or "default", get("freshness_custom")
    if freshness not in ("default", "off", "custom"):
        freshness, freshness_custom = "custom", freshness
    return FormState(values, as_of, as_of_custom, freshness, freshness_custom)


def _quote(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + "…"


def turn_choices(history: History) -> list[Choice]:
    """The "start of turn n" choices: what the model saw when that user message arrived."""
    texts = {m.external_id: m.content for m in history.messages}
    choices = []
    for turn in turn_starts(history):
        when = turn.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
        quote = _quote(texts.get(turn.message_id))
        label = f"Start of turn {turn.index + 1} · {when} UTC" + (f" · “{quote}”" if quote else "")
        choices.append(Choice(f"turn:{turn.index + 1}", label))
    return choices
