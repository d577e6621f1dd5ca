"""Splitting what an agent records into requests within the server's limits, and merging the
answers back into one. Pure functions: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

JSON = dict[str, Any]
# (message id, round index, that round's calls): posted after the message that overflowed.
OverflowRound = tuple[str, int, list[JSON]]


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def round_calls(calls: Iterable[Mapping[str, Any]]) -> list[JSON]:
    """Calls inside a round carry no round_index: the round gives it (the API refuses it)."""
    return [{k: v for k, v in call.items() if k != "round_index"} for call in calls]


def list_object(data: list[JSON]) -> JSON:
    return {"object": "list", "data": data, "has_more": False}


def list_data(answer: Any) -> list[JSON]:
    if isinstance(answer, dict) and isinstance(answer.get("data"), list):
        return answer["data"]
    return []


def message_batches(
    messages: Sequence[Mapping[str, Any]], max_messages: int, max_calls: int
) -> Iterator[tuple[list[JSON], list[OverflowRound]]]:
    """Group messages into requests within both limits, keeping their order.

    Yields (messages for one request, rounds to post right after it). A message whose own calls
    exceed `max_calls` travels without them; its calls follow as rounds.
    """
    batch: list[JSON] = []
    calls_in_batch = 0
    for original in messages:
        message = dict(original)
        calls = list(message.get("tool_calls") or ())
        overflow: list[OverflowRound] = []
        if len(calls) > max_calls:
            message.pop("tool_calls")
            by_round: dict[int, list[Mapping[str, Any]]] = {}
            for call in calls:
                by_round.setdefault(int(call["round_index"]), []).append(call)
            overflow = [(message["id"], r, round_calls(by_round[r])) for r in sorted(by_round)]
            calls = []
        if batch and (len(batch) >= max_messages or calls_in_batch + len(calls) > max_calls):
            yield batch, []
            batch, calls_in_batch = [], 0
        batch.append(message)
        calls_in_batch += len(calls)
        if overflow:
            yield batch, overflow
            batch, calls_in_batch = [], 0
    if batch:
        yield batch, []
