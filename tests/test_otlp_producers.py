"""The real producers (docs/otlp-mapping.md, 'Producers'): each family's instrumentation runs a
tiny agent against a fake OpenAI server and exports, with the real OTLP/HTTP exporters in
protobuf and in OTLP/JSON, to a live Toolscope. The conversation Toolscope rebuilds must be what
the agent did: rounds, parallel calls in the model's order, arguments, results, usage, and a
replay equal to the second request the agent really sent.

The instrumentations live in their own virtualenv (`tests/otlp_agents/requirements.txt`, built
once and reused while the file is unchanged) and the Node one in
`tests/otlp_agents/node/node_modules` (`npm ci`); all agents of a database run in parallel.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from shared_setup import one_at_a_time

from tests.otlp_agents.fake_openai import FINAL_TEXT, USAGE_FIRST, USAGE_SECOND, FakeOpenAI
from tests.otlp_agents.tools import SYSTEM_PROMPT, USER_PROMPT, get_time, get_weather
from tests.otlp_agents.venvs import venv_python

AGENTS = Path(__file__).parent / "otlp_agents"
REQUIREMENTS = AGENTS / "requirements.txt"
NODE = AGENTS / "node"
IN_CI = os.environ.get("CI") == "true"
AGENT_TIMEOUT = 180


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def _stamp(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def agents_python() -> Path:
    """The interpreter of the producers' virtualenv, built from the pinned requirements once
    per machine, outside the work tree (tests/otlp_agents/venvs.py): a fresh clone (CI's)
    reuses it instead of installing it again."""
    return venv_python(REQUIREMENTS, "agents")


@pytest.fixture(scope="session")
def node_agent() -> Path:
    """The Node agent with its pinned npm packages installed (`npm ci`)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        _unavailable("node and npm are needed for the Node producer")
    stamp = NODE / "node_modules" / ".toolscope-lock.sha256"
    wanted = _stamp(NODE / "package-lock.json")
    with one_at_a_time(NODE / "node_modules"):  # the other xdist worker may be building it
        if not (stamp.exists() and stamp.read_text() == wanted):
            build = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if build.returncode != 0:
                _unavailable(f"cannot install the Node producer: {build.stderr[-2000:]}")
            stamp.write_text(wanted)
    return NODE / "agent.js"


@dataclass
class Run:
    """One agent run: how to start it and what Toolscope should make of it."""

    label: str
    script: str
    wire: str = "protobuf"
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    conversation: str | None = None  # the explicit id it sets, if any
    content: bool = True
    tool_spans: bool = True
    fake: Any = None
    output: str = ""

    @property
    def service(self) -> str:
        return f"agent-{self.label}"


RUNS = [
    Run("openai-v2", "agent_openai_v2.py", tool_spans=False),
    Run("openai-v2-json", "agent_openai_v2.py", wire="json", tool_spans=False),
    Run("openai-v2-wrapped", "agent_openai_v2.py", args=("--wrapped",), conversation="c-v2"),
    Run(
        "openai-v2-wrapped-json",
        "agent_openai_v2.py",
        wire="json",
        args=("--wrapped",),
        conversation="c-v2-json",
    ),
    Run("traceloop", "agent_traceloop.py", tool_spans=False),
    Run("traceloop-json", "agent_traceloop.py", wire="json", tool_spans=False),
    Run("openinference", "agent_openinference.py", tool_spans=False),
    Run(
        "openinference-wrapped",
        "agent_openinference.py",
        wire="json",
        args=("--wrapped",),
        conversation="c-oi",
    ),
    Run("pydantic-ai", "agent_pydantic_ai.py", conversation="c-pyd"),
    Run(
        "pydantic-ai-v6", "agent_pydantic_ai.py", wire="json", args=("--v6",), conversation="c-pyd6"
    ),
    Run("agent-framework", "agent_agent_framework.py"),
    Run("agent-framework-json", "agent_agent_framework.py", wire="json"),
    Run("node", "agent.js", wire="json", tool_spans=False),
    # Content capture off (the OpenTelemetry default).
    Run(
        "openai-v2-no-content",
        "agent_openai_v2.py",
        args=("--wrapped",),
        env={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT"},
        conversation="c-v2-off",
        content=False,
    ),
    Run(
        "pydantic-ai-no-content",
        "agent_pydantic_ai.py",
        env={"AGENT_CAPTURE_CONTENT": "0"},
        conversation="c-pyd-off",
        content=False,
    ),
    Run(
        "agent-framework-no-content",
        "agent_agent_framework.py",
        env={"AGENT_CAPTURE_CONTENT": "0"},
        content=False,
    ),
]


def _run_agent(run: Run, python: Path, node_agent: Path, endpoint: str, key: str) -> Run:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLSCOPE_"))},
        "OPENAI_BASE_URL": run.fake.base_url,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{key}",
        "OTEL_METRICS_EXPORTER": "none",
        "OTLP_WIRE": run.wire,
        "AGENT_SERVICE_NAME": run.service,
        "AGENT_CONVERSATION_ID": run.conversation or "",
        **run.env,
    }
    if run.script == "agent.js":
        env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/json"
        env["AGENT_CAPTURE_CONTENT"] = "1" if run.content else "0"
        command = ["node", str(node_agent)]
        cwd = node_agent.parent
    else:
        command = [str(python), str(AGENTS / run.script), *run.args]
        cwd = AGENTS
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=AGENT_TIMEOUT
    )
    run.output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{run.label} failed:\n{run.output}"
    return run


def _conversations(client, key) -> dict[str, dict]:
    """Every conversation of the project, by its `otel.service.name`."""
    out: dict[str, dict] = {}
    listing = client.get("/api/v1/conversations?limit=100", headers=key.headers).get_json()
    for item in listing["data"]:
        detail = client.get(f"/api/v1/conversations/{item['id']}", headers=key.headers)
        detail = detail.get_json()
        out.setdefault(detail["metadata"].get("otel.service.name"), []).append(detail)
    return out


def _calls(assistant: dict) -> list[list[dict]]:
    rounds: dict[int, list[dict]] = {}
    for call in assistant["tool_calls"]:
        rounds.setdefault(call["round_index"], []).append(call)
    return [sorted(rounds[r], key=lambda c: c["sequence_index"]) for r in sorted(rounds)]


def _normalized_request(messages: list[dict]) -> list[Any]:
    """An OpenAI chat request's messages, reduced to what a replay must reproduce."""
    out: list[Any] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            out.append(
                (
                    "assistant",
                    [
                        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                        for c in m["tool_calls"]
                    ],
                )
            )
        elif m["role"] == "tool":
            out.append(("tool", m["tool_call_id"], json.loads(m["content"])))
        else:
            content = m["content"]
            if isinstance(content, list):
                content = "\n\n".join(p["text"] for p in content if p.get("type") == "text")
            out.append((m["role"], content))
    return out


def _check_content(run: Run, conversation: dict, client, key) -> None:
    if run.conversation:
        assert conversation["id"] == run.conversation
    user, assistant = conversation["messages"]
    assert (user["role"], user["content"]) == ("user", USER_PROMPT)
    assert (assistant["content"], assistant["status"]) == (FINAL_TEXT, "completed")
    assert conversation["system_prompt"] == SYSTEM_PROMPT
    first_round = _calls(assistant)[0]
    assert [(c["id"], c["name"]) for c in first_round] == [
        ("call_weather_1", "get_weather"),
        ("call_time_1", "get_time"),
    ]
    assert [c["arguments"] for c in first_round] == [{"city": "Paris"}, {"city": "Paris"}]
    results = [json.loads(c["response"]["content"]) for c in first_round]
    assert results == [json.loads(get_weather("Paris")), json.loads(get_time("Paris"))]
    usage = sorted(assistant["usage"], key=lambda u: u["round_index"])
    assert [(u["input_tokens"], u["output_tokens"]) for u in usage] == [
        (USAGE_FIRST["prompt_tokens"], USAGE_FIRST["completion_tokens"]),
        (USAGE_SECOND["prompt_tokens"], USAGE_SECOND["completion_tokens"]),
    ]
    # The replay of the turn up to its final answer is the second request the agent sent.
    replay = client.get(
        f"/api/v1/conversations/{conversation['id']}/replay?format=openai-chat&freshness=off",
        headers=key.headers,
    ).get_json()
    assert replay["validation"] == []
    replayed = _normalized_request(replay["payload"]["messages"])
    assert replayed[-1] == ("assistant", FINAL_TEXT)
    sent = _normalized_request(run.fake.requests[1]["body"]["messages"])
    assert replayed[:-1] == sent


def _check_no_content(run: Run, conversation: dict) -> None:
    roles = [m["role"] for m in conversation["messages"]]
    assert roles == ["assistant"], f"no user message without content, got {conversation}"
    (assistant,) = conversation["messages"]
    assert (assistant["role"], assistant["content"], assistant["status"]) == (
        "assistant",
        None,
        "completed",
    )
    usage = sorted(assistant["usage"], key=lambda u: u["round_index"])
    assert [u["input_tokens"] for u in usage] == [
        USAGE_FIRST["prompt_tokens"],
        USAGE_SECOND["prompt_tokens"],
    ]
    (first_round,) = _calls(assistant)
    assert sorted(c["name"] for c in first_round) == ["get_time", "get_weather"]
    for call in first_round:
        assert call["arguments"] is None and call["response"] is None
        assert "otlp:content_not_captured" in call["redacted"]


def test_real_producers_reconstruct_the_conversation(
    agents_python, node_agent, live_server, client, project_key
):
    fakes = [FakeOpenAI() for _ in RUNS]
    for run, fake in zip(RUNS, fakes, strict=True):
        run.fake = fake.__enter__()
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(
                pool.map(
                    lambda run: _run_agent(
                        run, agents_python, node_agent, live_server, project_key.key
                    ),
                    RUNS,
                )
            )
    finally:
        for fake in fakes:
            fake.__exit__(None, None, None)

    conversations = _conversations(client, project_key)
    failures = []
    for run in RUNS:
        found = conversations.get(run.service, [])
        try:
            assert len(found) == 1, f"{len(found)} conversations"
            if run.content:
                _check_content(run, found[0], client, project_key)
            else:
                _check_no_content(run, found[0])
        except (AssertionError, ValueError, KeyError) as exc:
            failures.append(f"{run.label}: {exc!r}"[:3000])
    assert not failures, "\n".join(failures)
