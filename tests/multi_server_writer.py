"""The writer processes of tests/test_server_multi_server.py. A module of its own that imports
nothing of Toolscope: each of the 8 spawned processes imports it, and a process that imported
the app would spend seconds of the machine's two cores doing so."""

from __future__ import annotations

import random
import time

CONVERSATIONS = 3  # native turns
ROUNDS = 2
CALLS_PER_ROUND = 5
TOOL_MESSAGES = 6  # MessageTool batches
CALLS_PER_BATCH = 20
MAX_503_RETRIES = 20


def turn_body(k: int) -> dict:
    """The same turn for every writer: what one agent sends, and sends again when it retries."""
    return {
        "user": {"id": f"ms-{k}-user", "content": f"question {k}"},
        "assistant": {
            "id": f"ms-{k}-answer",
            "content": f"answer {k}",
            "model": "gpt-4o",
            "rounds": [
                {
                    "usage": {"input_tokens": 100 + r, "output_tokens": 10},
                    "calls": [
                        {
                            "id": f"call_{k}_{r}_{s}",
                            "name": "search",
                            "arguments": {"q": f"{k}.{r}.{s}"},
                            "response": {"content": f"result {k}.{r}.{s}"},
                        }
                        for s in range(CALLS_PER_ROUND)
                    ],
                }
                for r in range(ROUNDS)
            ],
        },
    }


def tool_batch(m: int, with_responses: bool) -> dict:
    """A MessageTool batch; half the writers send it before the responses exist."""
    return {
        "messageId": f"ms-tools-{m}",
        "tools": [
            _tool_item(i // 5, i % 5, f"r{m}-{i}" if with_responses else None)
            for i in range(CALLS_PER_BATCH)
        ],
    }


def writer_plan(writer: int) -> list[tuple[str, dict]]:
    plan = [(f"/api/v1/conversations/ms-{k}/turns", turn_body(k)) for k in range(CONVERSATIONS)]
    plan += [
        ("/api/v1/messages/tools", tool_batch(m, with_responses=writer % 2 == 0))
        for m in range(TOOL_MESSAGES)
    ]
    random.Random(writer).shuffle(plan)
    return plan


def write(servers: list[str], key: str, writer: int, start_at: float) -> list[tuple[str, int]]:
    """One writer process: each request to one server, then its retry to the other; a 503 is
    retried (as the client and the unique_sdk do). Returns (url, status) of every answer."""
    import requests

    answers: list[tuple[str, int]] = []
    time.sleep(max(0.0, start_at - time.time()))  # all writers start together
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {key}"
        for n, (path, body) in enumerate(writer_plan(writer)):
            first = (writer + n) % len(servers)
            for server in (servers[first], servers[1 - first]):
                for attempt in range(MAX_503_RETRIES):
                    status = session.post(server + path, json=body, timeout=60).status_code
                    answers.append((path, status))
                    if status != 503:
                        break
                    time.sleep(0.05 * (attempt + 1))
    return answers


def _tool_item(round_index: int, sequence_index: int, response: str | None) -> dict:
    """A MessageTool ToolItem as the SDK sends it (as tests/api_support.tool_item makes it)."""
    item: dict = {
        "externalToolCallId": f"call_{round_index}_{sequence_index}",
        "functionName": "get_weather",
        "arguments": {"city": "Zurich"},
        "roundIndex": round_index,
        "sequenceIndex": sequence_index,
    }
    if response is not None:
        item["response"] = {"content": response}
    return item
