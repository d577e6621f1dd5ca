"""Running an agent framework for real and checking what Toolscope made of it (issue 21).

Each run starts its fake model server (OpenAI or Anthropic), a recording proxy in front of the
live Toolscope (the producer's own OTLP exporter talks to the proxy, which forwards every
export and keeps it), and the agent in its family's virtualenv or under Node. Then:

- `check_two_turns`: the framework scenario's end state through the API: one conversation,
  two user turns, four rounds with their usage once each, exactly the model's three calls with
  arguments and the results the model saw, two final texts, and a replay valid in the three
  formats whose native one is the last request the agent sent plus the final text;
- `end_state` and `resend_newest_first`: item 4, the same capture sent one span or log record
  per request, newest first, twice, to another project ends in the same state (token counts of
  arguments and results excluded: the background pass fills them later).

Item 4 runs on one database per family (`resends_on`), SQLite for some families and PostgreSQL
for the others, so that real captures are re-sent to both: each one-item request re-projects the
conversation it grows, the dearest part of these tests after the agents themselves, and the
order and batching rules it checks live in the projection, which is the same code on both
databases. The producer's own batching, the end state and the replay are checked on both.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conftest import add_project_key

from tests.otlp_agents.capture import Captured, RecordingProxy, split_newest_first
from tests.otlp_agents.fake_openai import (
    FINAL_TEXT,
    FOLLOW_UP_PROMPT,
    FOLLOW_UP_TEXT,
    USAGE_FIRST,
    USAGE_FOURTH,
    USAGE_SECOND,
    USAGE_THIRD,
)
from tests.otlp_agents.tools import USER_PROMPT

AGENTS = Path(__file__).parent / "otlp_agents"
AGENT_TIMEOUT = 240
FORMATS = ("openai-chat", "openai-responses", "anthropic")
USAGES = [
    (u["prompt_tokens"], u["completion_tokens"])
    for u in (USAGE_FIRST, USAGE_SECOND, USAGE_THIRD, USAGE_FOURTH)
]


# --- The recording proxy ------------------------------------------------------------------


def resends_on(app, database: str) -> bool:
    """Whether this test's `app` runs on `database` ("sqlite" or "postgresql"), the one its
    family's item 4 runs on."""
    assert database in ("sqlite", "postgresql"), database  # a typo must not skip item 4
    return app.config["DATABASE_URL"].startswith(database)


def resend_newest_first(client, key, captured: list[Captured], times: int = 2) -> int:
    """Send the capture one item per request, newest first, `times` times; the count sent."""
    requests = split_newest_first(captured)
    for _ in range(times):
        for path, content_type, body in requests:
            answer = client.post(
                path, data=body, headers={**key.headers, "Content-Type": content_type}
            )
            assert answer.status_code == 200, answer.data[:500]
    return len(requests)


# --- Running an agent ----------------------------------------------------------------------


@dataclass
class FrameworkRun:
    """One agent run: how to start it and what it should come out as."""

    label: str
    command: list[str]
    fake: Any  # FakeOpenAI or FakeAnthropic, entered
    wire: str = "protobuf"  # protobuf or json
    env: dict[str, str] = field(default_factory=dict)
    conversation: str | None = None  # the explicit id it exports, if any
    native: str = "openai-chat"  # the replay format of the model's own API
    cwd: Path = AGENTS
    captured: list[Captured] = field(default_factory=list)
    output: str = ""

    @property
    def service(self) -> str:
        return f"fw-{self.label}"


def run_agent(run: FrameworkRun, endpoint: str, key: str) -> FrameworkRun:
    """Run the agent against its fake model, exporting through a recording proxy."""
    with RecordingProxy(endpoint) as proxy:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLSCOPE_"))},
            "OPENAI_BASE_URL": run.fake.base_url,
            "ANTHROPIC_BASE_URL": run.fake.base_url,
            "OTEL_EXPORTER_OTLP_ENDPOINT": proxy.url,
            "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{key}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json" if run.wire == "json" else "http/protobuf",
            "OTEL_METRICS_EXPORTER": "none",
            "OTLP_WIRE": run.wire,
            "AGENT_SERVICE_NAME": run.service,
            "AGENT_CONVERSATION_ID": run.conversation or "",
            **run.env,
        }
        done = subprocess.run(
            run.command,
            cwd=run.cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT,
        )
        run.captured = list(proxy.requests)
    run.output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{run.label} failed:\n{run.output}"
    return run


# --- The end state ---------------------------------------------------------------------------


def conversations_of(client, key, service: str) -> list[dict[str, Any]]:
    """The project's conversations made from `service`'s spans, in full."""
    out = []
    listing = client.get("/api/v1/conversations?limit=100", headers=key.headers).get_json()
    for item in listing["data"]:
        detail = client.get(f"/api/v1/conversations/{item['id']}", headers=key.headers).get_json()
        if detail["metadata"].get("otel.service.name") == service:
            out.append(detail)
    return sorted(out, key=lambda c: c["id"])


def _rounds(assistant: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    rounds: dict[int, list[dict[str, Any]]] = {}
    for call in assistant["tool_calls"]:
        rounds.setdefault(call["round_index"], []).append(call)
    return {r: sorted(c, key=lambda c: c["sequence_index"]) for r, c in sorted(rounds.items())}


def end_state(client, key, service: str) -> list[Any]:
    """What a user sees of `service`'s conversations, without token counts of arguments and
    results (the background pass fills them) and without row ids."""
    state = []
    for conversation in conversations_of(client, key, service):
        messages = []
        for message in conversation["messages"]:
            calls = [
                (
                    c["round_index"],
                    c["sequence_index"],
                    c["id"],
                    c["name"],
                    c["arguments"],
                    (c.get("response") or {}).get("content"),
                    c.get("is_error"),
                    sorted(c.get("redacted") or []),
                )
                for c in message.get("tool_calls") or []
            ]
            usage = sorted(
                (u["round_index"], u.get("model"), u["input_tokens"], u["output_tokens"])
                for u in message.get("usage") or []
            )
            messages.append(
                (
                    message["role"],
                    message.get("content"),
                    message.get("status"),
                    message.get("created_at"),
                    sorted(calls),
                    usage,
                )
            )
        state.append(
            (
                conversation["id"],
                conversation.get("system_prompt"),
                conversation["metadata"],
                messages,
            )
        )
    return state


def _json_or_text(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _text(content: Any) -> Any:
    if isinstance(content, list):
        return "\n\n".join(p["text"] for p in content if p.get("type") in ("text", None))
    return content


def normalized_openai(messages: list[dict[str, Any]]) -> list[Any]:
    """OpenAI chat messages reduced to what a replay must reproduce."""
    out: list[Any] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in m["tool_calls"]
            ]
            out.append(("assistant", calls))
        elif m["role"] == "tool":
            out.append(("tool", m["tool_call_id"], _json_or_text(_text(m["content"]))))
        else:
            out.append((m["role"], _text(m["content"])))
    return out


def normalized_anthropic(body: dict[str, Any]) -> list[Any]:
    """An Anthropic Messages request (system + messages) reduced the same way."""
    system = body.get("system")
    out: list[Any] = [("system", _text(system))] if system else []
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, str):
            out.append((m["role"], content))
            continue
        uses = [(b["id"], b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
        results = [b for b in content if b["type"] == "tool_result"]
        texts = [b["text"] for b in content if b["type"] == "text"]
        if texts:
            out.append((m["role"], "\n\n".join(texts)))
        if uses:
            out.append(("assistant", uses))
        for b in results:
            out.append(("tool", b["tool_use_id"], _json_or_text(_text(b["content"]))))
    return out


def _results_seen(run: FrameworkRun) -> dict[str, Any]:
    """Call id → the result the model saw (the last request carries them all)."""
    body = run.fake.requests[-1]["body"]
    if run.native == "anthropic":
        items = normalized_anthropic(body)
    else:
        items = normalized_openai(body["messages"])
    return {item[1]: item[2] for item in items if item[0] == "tool"}


def check_two_turns(run: FrameworkRun, client, key) -> None:
    """The framework scenario's end state (OTLP_FRAMEWORKS.md), through the API."""
    found = conversations_of(client, key, run.service)
    assert len(found) == 1, f"{len(found)} conversations: {[c['id'] for c in found]}"
    (conversation,) = found
    if run.conversation:
        assert conversation["id"] == run.conversation
    roles = [m["role"] for m in conversation["messages"]]
    assert roles == ["user", "assistant"] * 2, roles
    user1, answer1, user2, answer2 = conversation["messages"]
    assert (user1["content"], user2["content"]) == (USER_PROMPT, FOLLOW_UP_PROMPT)
    assert (answer1["content"], answer2["content"]) == (FINAL_TEXT, FOLLOW_UP_TEXT)
    assert (answer1["status"], answer2["status"]) == ("completed", "completed")

    usage = [
        (u["input_tokens"], u["output_tokens"])
        for a in (answer1, answer2)
        for u in sorted(a["usage"], key=lambda u: u["round_index"])
    ]
    assert usage == USAGES, usage

    seen = _results_seen(run)
    model_calls = [  # what the model asked for, in its order, from the fake's answers
        [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Paris"})],
        [("get_weather", {"city": "Lyon"})],
    ]
    for answer, expected in zip((answer1, answer2), model_calls, strict=True):
        rounds = _rounds(answer)
        assert list(rounds) == [0], f"calls in rounds {list(rounds)}: {rounds}"
        calls = rounds[0]
        assert [(c["name"], c["arguments"]) for c in calls] == expected
        for call in calls:
            assert call["id"] in seen, f"{call['id']} is not a call id the model sent"
            response = _json_or_text((call.get("response") or {}).get("content"))
            assert response == seen[call["id"]], (call["id"], response, seen[call["id"]])
    assert len(seen) == 3, seen

    replay_path = f"/api/v1/conversations/{conversation['id']}/replay?freshness=off&format="
    for fmt in FORMATS:
        replay = client.get(replay_path + fmt, headers=key.headers).get_json()
        assert replay["validation"] == [], (fmt, replay["validation"])
    replay = client.get(replay_path + run.native, headers=key.headers).get_json()
    last = run.fake.requests[-1]["body"]
    if run.native == "anthropic":
        replayed = normalized_anthropic(replay["payload"])
        sent = normalized_anthropic(last)
    else:
        replayed = normalized_openai(replay["payload"]["messages"])
        sent = normalized_openai(last["messages"])
    assert replayed[-1] == ("assistant", FOLLOW_UP_TEXT), replayed[-1]
    assert replayed[:-1] == sent, (replayed, sent)


def run_and_check(
    runs: list[FrameworkRun],
    fakes: list[Any],
    *,
    endpoint: str,
    client,
    project_key,
    app,
    resend_on: str,
    workers: int = 3,
    also: Callable[[FrameworkRun], None] | None = None,
) -> None:
    """Run the agents side by side (their fake model servers are closed afterwards), then for
    each run: `also(run)` if given, `check_two_turns`, and, when `app` runs on `resend_on` (the
    family's database for item 4, `resends_on`), item 4: its capture sent one item per request,
    newest first, twice, to a project of its own ends in the same state. Every run's failure is
    reported, not only the first one's."""
    resend = resends_on(app, resend_on)
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(lambda run: run_agent(run, endpoint, project_key.key), runs))
    finally:
        for fake in fakes:
            fake.__exit__(None, None, None)

    failures = []
    for run in runs:
        try:
            if also is not None:
                also(run)
            check_two_turns(run, client, project_key)
            if not resend:
                continue
            resend_key = add_project_key(app, f"resend-{run.label}")
            resend_newest_first(client, resend_key, run.captured)
            expected = end_state(client, project_key, run.service)
            assert end_state(client, resend_key, run.service) == expected
        except AssertionError as exc:
            failures.append(f"{run.label}: {exc!r}"[:3000])
    assert not failures, "\n".join(failures)
