"""Building blocks for demo payloads: API requests, a clock relative to "now", agent turns.

Pure module (no Flask, no database): the scenarios are plain API request bodies, so the demo
goes through exactly the code path an agent's requests take.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from urllib.parse import quote

from ..replay.jsonfast import dumps
from ..tokens import count_tokens

JSON = dict[str, Any]
# How long the model takes to answer a service call, in the demo's made-up timeline: a first
# token after LATENCY seconds, the prompt read at PREFILL tokens a second, the answer written at
# DECODE tokens a second (each drawn per service call, seeded by the turn and the round).
LATENCY = (0.3, 0.9)
PREFILL = 25_000
DECODE = (55.0, 95.0)
# What the provider adds to a tool call's name and arguments in the output (ids, wrapping).
CALL_FRAMING = 7
# Token counts of the demo's texts (the same arguments and results are counted for the output
# tokens and again for the context, 20,000 times in the 10,000-call conversation).
count_text = lru_cache(maxsize=1 << 16)(count_tokens)


@dataclass(frozen=True)
class ApiRequest:
    method: str
    path: str  # below /api/v1
    body: JSON | None = None


@dataclass
class Scenario:
    """One demo conversation: its id, what it shows, and the requests that create it."""

    conversation_id: str
    shows: str
    requests: list[ApiRequest] = field(default_factory=list)


def iso(moment: datetime) -> str:
    return moment.isoformat()


def conversation_path(conversation_id: str, *rest: str | int) -> str:
    parts = [quote(str(part), safe="") for part in (conversation_id, *rest)]
    return "/conversations/" + "/".join(parts)


def call_id(*parts: object) -> str:
    """A stable OpenAI-looking tool call id, the same on every load."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()
    return "call_" + digest[:24]


def sources(first: int, items: list[tuple[str, str, str]]) -> str:
    """A search result as unique_toolkit stores it: a JSON list of numbered sources."""
    return json.dumps(
        [
            {"source_number": first + n, "title": title, "url": url, "snippet": snippet}
            for n, (title, url, snippet) in enumerate(items)
        ]
    )


def usage(
    model: str,
    provider: str,
    input_tokens: int,
    output_tokens: int,
    cached: int = 0,
    at: datetime | None = None,
):
    """A service call's usage; ``at``: when it answered (else the server stores its own time)."""
    body = {
        "model": model,
        "provider": provider,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cached_tokens": cached,
    }
    if at is not None:
        body["created_at"] = iso(at)
    return body


@dataclass
class Call:
    """A tool call as the agent ran it. `result` None: no response was recorded."""

    name: str
    arguments: JSON | None
    result: str | None = None
    seconds: float = 0.3
    is_error: bool = False
    id: str | None = None  # None: derived from the turn; "" for an agent that sends none


class Turn:
    """One user message and the assistant's run: rounds of parallel calls, then the answer.

    Time advances as an agent's would: the model answers a service call, the round's calls start
    together and overlap, the next service call starts when the slowest one has finished.
    """

    def __init__(
        self,
        key: str,
        at: datetime,
        user: str | None,
        *,
        model: str = "gpt-4o",
        provider: str = "openai",
    ):
        self.key = key
        self.started = at
        self.clock = at
        self.user_text = user
        self.model = model
        self.provider = provider
        self.rounds: list[JSON] = []
        # A rough size of the prompt, for the model's time only: the reported input tokens are
        # the replayed context's, counted once the conversation is complete (usage.settle_usage).
        self._prompt_size = 400 + len(user or "") // 4

    @property
    def user_id(self) -> str:
        return f"{self.key}-user"

    @property
    def assistant_id(self) -> str:
        return f"{self.key}-assistant"

    def _tokens(self, text: str | None) -> int:
        return count_text(text, self.model) if text else 0

    def _model_time(self, index: int, output_tokens: int) -> timedelta:
        """How long service call ``index`` of the turn takes: seeded, so every load is the same."""
        rng = random.Random(f"{self.key}:{index}")
        seconds = (
            rng.uniform(*LATENCY)
            + self._prompt_size / PREFILL
            + output_tokens / rng.uniform(*DECODE)
        )
        return timedelta(milliseconds=round(seconds * 1000))

    def round(
        self,
        *calls: Call,
        output_tokens: int | None = None,
        text: str | None = None,
        reasoning: str | None = None,
    ) -> Turn:
        """A service call that asked for `calls` in parallel (saying ``text``, having reasoned
        ``reasoning``), and their execution. The service call's start and end are sent, so
        the round shows its latency and the waterfall its model time. Its output tokens are
        what it wrote (text, reasoning, the calls' names and arguments) unless given."""
        index = len(self.rounds)
        if output_tokens is None:
            output_tokens = (
                self._tokens(text)
                + self._tokens(reasoning)
                + sum(
                    self._tokens(c.name) + self._tokens(dumps(c.arguments)) + CALL_FRAMING
                    for c in calls
                )
                + random.Random(f"{self.key}:{index}:out").randint(1, 9)
            )
        sent = self.clock
        self.clock += self._model_time(index, output_tokens)
        requested = self.clock
        encoded = [self._call(index, seq, call, requested) for seq, call in enumerate(calls)]
        slowest = max((call.seconds for call in calls), default=0.0)
        self.clock = requested + timedelta(seconds=0.05 + slowest)
        self.rounds.append(
            {
                "usage": {
                    **usage(self.model, self.provider, 0, output_tokens, at=requested),
                    "started_at": iso(sent),
                    "ended_at": iso(requested),
                    **({"content": text} if text else {}),
                    **({"reasoning": reasoning} if reasoning else {}),
                },
                "calls": encoded,
            }
        )
        # Every result is sent back to the next service call: the prompt grows.
        self._prompt_size += output_tokens + sum(len(c.result or "") // 4 for c in calls)
        return self

    def _call(self, round_index: int, seq: int, call: Call, requested: datetime) -> JSON:
        started = requested + timedelta(seconds=0.02 * (seq + 1))
        ended = started + timedelta(seconds=call.seconds)
        encoded: JSON = {
            "id": call.id if call.id is not None else call_id(self.key, round_index, seq),
            "name": call.name,
            "arguments": call.arguments,
            "sequence_index": seq,
            "created_at": iso(requested),
            "started_at": iso(started),
        }
        if call.result is not None:
            encoded["ended_at"] = iso(ended)
            encoded["response"] = {
                "content": call.result,
                "created_at": iso(ended),
                "is_error": call.is_error,
            }
        return encoded

    def user_message(self) -> JSON | None:
        if self.user_text is None:
            return None
        return {
            "id": self.user_id,
            "role": "user",
            "content": self.user_text,
            "created_at": iso(self.started),
        }

    def assistant_message(self, content: str | None, status: str) -> JSON:
        return {
            "id": self.assistant_id,
            "role": "assistant",
            "content": content,
            "status": status,
            "model": self.model,
            "created_at": iso(self.started + timedelta(milliseconds=1)),
        }

    def answer_usage(self, answer: str) -> JSON:
        """The final service call, which answered in text (no tool calls)."""
        index = len(self.rounds)
        output_tokens = self._tokens(answer) + random.Random(f"{self.key}:{index}:out").randint(
            1, 4
        )
        sent = self.clock
        self.clock += self._model_time(index, output_tokens)
        return {
            **usage(self.model, self.provider, 0, output_tokens, at=self.clock),
            "started_at": iso(sent),
            "ended_at": iso(self.clock),
        }

    def request(
        self, conversation_id: str, answer: str | None, status: str = "completed"
    ) -> ApiRequest:
        """The whole turn as one `/turns` request (per-run persistence)."""
        rounds = list(self.rounds)
        if answer is not None and status == "completed":
            rounds.append({"usage": self.answer_usage(answer), "calls": []})
        assistant = self.assistant_message(answer, status)
        del assistant["role"]  # implied by the turn
        assistant["rounds"] = rounds
        return ApiRequest(
            "POST",
            conversation_path(conversation_id, "turns"),
            {"user": self.user_message(), "assistant": assistant},
        )
