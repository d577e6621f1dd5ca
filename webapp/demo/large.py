"""The large demo conversation (`toolscope demo --large`): 10,000 calls for performance checks."""

from __future__ import annotations

from datetime import datetime, timedelta

from .catalog import PREFIX, conversation
from .payloads import Call, Scenario, Turn, sources
from .usage import settle_usage

LARGE_ID = PREFIX + "large-10k-calls"
LARGE_TURNS = 1_000
LARGE_ROUNDS = 2
LARGE_CALLS_PER_ROUND = 5


def large_conversation(now: datetime, turns: int = LARGE_TURNS) -> Scenario:
    """1,000 turns of 2 rounds x 5 parallel calls: 10,000 calls, one turn a minute.

    Its support-bot window keeps every result, so the context grows to about 190,000 tokens by
    the last turn: gpt-4.1 (a 1M-token context), whose prompt cache reads most of it."""
    start = now - timedelta(minutes=turns)
    requests = [
        conversation(
            LARGE_ID,
            title="Performance check: 10,000 calls over 1,000 turns",
            channel="support-bot",
            created=start,
            tools=["internal_search", "fetch_page"],
        )
    ]
    for n in range(turns):
        turn = Turn(
            f"{LARGE_ID}-{n}", start + timedelta(minutes=n), f"Question {n}?", model="gpt-4.1"
        )
        first = n * LARGE_ROUNDS * LARGE_CALLS_PER_ROUND + 1
        for r in range(LARGE_ROUNDS):
            turn.round(
                *(
                    Call(
                        "internal_search" if r == 0 else "fetch_page",
                        {"query": f"q{n}.{r}.{s}"},
                        sources(
                            first + r * LARGE_CALLS_PER_ROUND + s,
                            [
                                (
                                    f"Doc {n}.{r}.{s}",
                                    f"https://docs.test/{n}/{r}/{s}",
                                    "Snippet text.",
                                ),
                            ],
                        ),
                        0.2 + 0.05 * s,
                    )
                    for s in range(LARGE_CALLS_PER_ROUND)
                )
            )
        requests.append(turn.request(LARGE_ID, f"Answer {n} [source{first}]."))
    return settle_usage(
        Scenario(LARGE_ID, "10,000 calls over 1,000 turns, for performance checks", requests)
    )
