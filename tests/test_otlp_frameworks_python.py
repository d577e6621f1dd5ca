"""The Python agent frameworks of issue 21, run for real: LangChain 1.x `create_agent` and
LangGraph `create_react_agent` (OpenInference, OpenLLMetry), the OpenAI Agents SDK on the
Responses and the Chat Completions API (OpenInference, Logfire over OTLP) and CrewAI
(OpenInference), each at its defaults with content on, against the fake OpenAI server, exporting
through its own OTLP exporter to a live Toolscope (through a recording proxy).

The scenario (../shared/OTLP_FRAMEWORKS.md): two user turns in one session; the model asks for
`get_weather` and `get_time` in parallel, then answers; then one `get_weather` call for Lyon, then
answers. Toolscope must show 1 conversation (the session's id), 2 user turns, 4 rounds with their
usage once, exactly the model's 3 calls with arguments and results, the 2 final texts, and a
replay valid in the three formats. The rules:
docs/otlp-mapping.md, 'Tool spans without a call id'
docs/otlp-mapping.md, 'The outermost agent span keys the turn'
docs/otlp-mapping.md, 'Events in an attribute'

Order and batching (issue 21, item 4): what each producer exported is sent again to a fresh
project one span or log record per request, newest first, twice, and must end in the same state
(token counts excluded: the background pass fills them later); on one database per family
(`RESEND_ON`, tests/otlp_frameworks_support.py, `resends_on`).

Each family has its own virtualenv (tests/otlp_agents/venvs.py); its agents run in parallel.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import add_project_key

from tests.otlp_agents.capture import RecordingProxy, split_newest_first
from tests.otlp_agents.fake_openai import (
    FINAL_TEXT,
    FOLLOW_UP_CITY,
    FOLLOW_UP_PROMPT,
    FOLLOW_UP_TEXT,
    USAGE_FIRST,
    USAGE_FOURTH,
    USAGE_SECOND,
    USAGE_THIRD,
    FakeOpenAI,
)
from tests.otlp_agents.tools import SYSTEM_PROMPT, USER_PROMPT, get_time, get_weather
from tests.otlp_agents.venvs import family_python
from tests.otlp_frameworks_support import resends_on
from tests.test_otlp_producers import node_agent  # noqa: F401  (the Node agent's fixture)

AGENTS = Path(__file__).parent / "otlp_agents"
AGENT_TIMEOUT = 300
FORMATS = ("openai-chat", "openai-responses", "anthropic")


@dataclass
class Run:
    label: str
    script: str
    args: tuple[str, ...]
    # The requests the agent sent carry the whole session (not CrewAI: a kickoff has no history)
    # in Chat Completions messages: the replay must be the last one, plus the final answer.
    chat_history: bool = True
    # The user message is the prompt itself (CrewAI wraps it in its task template).
    exact_prompt: bool = True
    fake: Any = None
    proxy: Any = None
    output: str = ""

    @property
    def service(self) -> str:
        return f"fw-{self.label}"

    @property
    def conversation(self) -> str:
        return f"conv-{self.label}"


def _langchain(builder: str, instrumentation: str) -> Run:
    return Run(
        f"{builder}-{instrumentation}",
        "agent_langchain.py",
        ("--builder", builder, "--instrumentation", instrumentation),
    )


def _openai_agents(model: str, instrumentation: str) -> Run:
    return Run(
        f"agents-{model}-{instrumentation}",
        "agent_openai_agents.py",
        ("--model", model, "--instrumentation", instrumentation),
        chat_history=model == "chat",
    )


FAMILIES: dict[str, list[Run]] = {
    "langchain": [
        _langchain(builder, instrumentation)
        for builder in ("create_agent", "create_react_agent")
        for instrumentation in ("openinference", "openllmetry")
    ],
    "openai_agents": [
        _openai_agents(model, instrumentation)
        for model in ("responses", "chat")
        for instrumentation in ("openinference", "logfire")
    ],
    "crewai": [
        Run("crewai-openinference", "agent_crewai.py", (), chat_history=False, exact_prompt=False)
    ],
}


# The database each family's item 4 runs on: both are covered, each family's re-send once.
RESEND_ON = {"langchain": "sqlite", "openai_agents": "postgresql", "crewai": "sqlite"}
NODE_RESEND_ON = "postgresql"


def _run_agent(run: Run, python: Path, key: str) -> Run:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLSCOPE_"))},
        "OPENAI_BASE_URL": run.fake.base_url,
        "OTEL_EXPORTER_OTLP_ENDPOINT": run.proxy.url,
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{key}",
        "OTEL_METRICS_EXPORTER": "none",
        "AGENT_SERVICE_NAME": run.service,
        "AGENT_CONVERSATION_ID": run.conversation,
    }
    env.pop("OPENAI_API_KEY", None)  # the Agents SDK's own exporter must stay idle
    done = subprocess.run(
        [str(python), str(AGENTS / run.script), *run.args],
        cwd=AGENTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=AGENT_TIMEOUT,
    )
    run.output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{run.label} failed:\n{run.output}"
    return run


def _details(client, key) -> dict[str, list[dict]]:
    """Every conversation of the project, in full, by its `otel.service.name`."""
    out: dict[str, list[dict]] = {}
    listing = client.get("/api/v1/conversations?limit=100", headers=key.headers).get_json()
    for item in listing["data"]:
        detail = client.get(f"/api/v1/conversations/{item['id']}", headers=key.headers).get_json()
        out.setdefault(detail["metadata"].get("otel.service.name"), []).append(detail)
    return out


def _rounds(assistant: dict) -> list[list[dict]]:
    rounds: dict[int, list[dict]] = {}
    for call in assistant["tool_calls"]:
        rounds.setdefault(call["round_index"], []).append(call)
    return [sorted(rounds[r], key=lambda c: c["sequence_index"]) for r in sorted(rounds)]


def _ids_sent_back(fake) -> list[str]:
    """The call ids the agent sent back to the model with results, in order, once each."""
    ids: list[str] = []
    for request in fake.requests:
        body = request["body"]
        for item in [*(body.get("messages") or []), *(body.get("input") or [])]:
            if not isinstance(item, dict):
                continue
            found = item.get("tool_call_id") or (
                item.get("call_id") if item.get("type") == "function_call_output" else None
            )
            if found and found not in ids:
                ids.append(found)
    return ids


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _chat_request(messages: list[dict]) -> list[Any]:
    """A Chat Completions request's messages, reduced to what a replay must reproduce."""
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
            out.append(("tool", m["tool_call_id"], json.loads(_text(m["content"]))))
        else:
            out.append((m["role"], _text(m["content"])))
    return out


def check_whole(run: Run, found: list[dict], client, key) -> None:
    """The end state of issue 21, item 1, for one run."""
    assert len(found) == 1, f"{len(found)} conversations"
    conversation = found[0]
    assert conversation["id"] == run.conversation
    assert SYSTEM_PROMPT in (conversation["system_prompt"] or "")
    roles = [m["role"] for m in conversation["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"], roles
    first_user, first, second_user, second = conversation["messages"]
    if run.exact_prompt:
        assert (first_user["content"], second_user["content"]) == (USER_PROMPT, FOLLOW_UP_PROMPT)
    else:
        assert USER_PROMPT in first_user["content"]
        assert FOLLOW_UP_PROMPT in second_user["content"]
    assert [(first["content"], first["status"]), (second["content"], second["status"])] == [
        (FINAL_TEXT, "completed"),
        (FOLLOW_UP_TEXT, "completed"),
    ]
    usage = [
        [(u["input_tokens"], u["output_tokens"]) for u in sorted(a["usage"], key=_round_index)]
        for a in (first, second)
    ]
    assert usage == [
        [
            (USAGE_FIRST["prompt_tokens"], USAGE_FIRST["completion_tokens"]),
            (USAGE_SECOND["prompt_tokens"], USAGE_SECOND["completion_tokens"]),
        ],
        [
            (USAGE_THIRD["prompt_tokens"], USAGE_THIRD["completion_tokens"]),
            (USAGE_FOURTH["prompt_tokens"], USAGE_FOURTH["completion_tokens"]),
        ],
    ]
    # Exactly the model's calls: one round of two, then one round of one.
    calls = [[(c["id"], c["name"], c["arguments"]) for c in r] for r in _rounds(first)] + [
        [(c["id"], c["name"], c["arguments"]) for c in r] for r in _rounds(second)
    ]
    ids = _ids_sent_back(run.fake)
    assert len(ids) == 3 and all(re.fullmatch(r"call_\w+", i) for i in ids), ids
    assert calls == [
        [(ids[0], "get_weather", {"city": "Paris"}), (ids[1], "get_time", {"city": "Paris"})],
        [(ids[2], "get_weather", {"city": FOLLOW_UP_CITY})],
    ]
    results = [
        json.loads(c["response"]["content"]) for c in first["tool_calls"] + second["tool_calls"]
    ]
    assert sorted(results, key=json.dumps) == sorted(
        [
            json.loads(get_weather("Paris")),
            json.loads(get_time("Paris")),
            json.loads(get_weather(FOLLOW_UP_CITY)),
        ],
        key=json.dumps,
    )
    for fmt in FORMATS:
        replay = client.get(
            f"/api/v1/conversations/{run.conversation}/replay?format={fmt}&freshness=off",
            headers=key.headers,
        ).get_json()
        assert replay["validation"] == [], (fmt, replay["validation"])
        if fmt == "openai-chat" and run.chat_history:
            replayed = _chat_request(replay["payload"]["messages"])
            assert replayed[-1] == ("assistant", FOLLOW_UP_TEXT)
            assert replayed[:-1] == _chat_request(run.fake.requests[-1]["body"]["messages"])


def _round_index(item: dict) -> int:
    return item["round_index"]


# What the background token pass fills later, and the time of the last write.
_VOLATILE = frozenset(
    {"updated_at", "content_tokens", "arguments_tokens", "response_tokens", "token_method"}
)


def end_state(value: Any) -> Any:
    """Conversations' API documents without what the token pass fills later and the time of
    the last write: everything else (ids, texts, calls, results, span times, usage and cost)
    must be equal."""
    if isinstance(value, dict):
        return {k: end_state(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [end_state(v) for v in value]
    return value


def resend(runs: list[Run], client, key) -> None:
    """Each run's capture, one span or log record per request, newest first, twice."""
    for run in runs:
        requests = split_newest_first(run.proxy.requests)
        assert requests, f"{run.label} exported nothing"
        for _ in range(2):
            for path, content_type, body in requests:
                answer = client.post(
                    path, data=body, headers={**key.headers, "Content-Type": content_type}
                )
                assert answer.status_code == 200, answer.data[:500]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_python_framework_arrives_whole(family, app, live_server, client, project_key):
    python = family_python(family)
    runs = FAMILIES[family]
    fakes = [FakeOpenAI() for _ in runs]
    proxies = [RecordingProxy(live_server) for _ in runs]
    for run, fake, proxy in zip(runs, fakes, proxies, strict=True):
        run.fake, run.proxy = fake.__enter__(), proxy.__enter__()
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda run: _run_agent(run, python, project_key.key), runs))
    finally:
        for fake, proxy in zip(fakes, proxies, strict=True):
            fake.__exit__(None, None, None)
            proxy.__exit__(None, None, None)

    batched = _details(client, project_key)
    failures = []
    for run in runs:
        try:
            check_whole(run, batched.get(run.service, []), client, project_key)
        except (AssertionError, ValueError, KeyError, TypeError) as exc:
            failures.append(f"{run.label}: {exc!r}"[:3000])
    assert not failures, "\n".join(failures)

    if not resends_on(app, RESEND_ON[family]):
        return
    fresh = add_project_key(app, "resent")
    resend(runs, client, fresh)
    resent = _details(client, fresh)
    for run in runs:
        assert end_state(resent.get(run.service)) == end_state(batched.get(run.service)), run.label


def test_node_openai_export_resent_newest_first_keeps_its_system_prompt(
    node_agent,  # noqa: F811  (the fixture imported above)
    app,
    live_server,
    client,
    project_key,
):
    """The Node OpenAI instrumentation sends its content as log records stamped in milliseconds
    (tests/otlp_agents/node): resent one record per request, newest first, every record's
    position is 0, and the system prompt must still head the request it belongs to
    (docs/otlp-mapping.md, 'Where messages are read')."""
    with FakeOpenAI() as fake, RecordingProxy(live_server) as proxy:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLSCOPE_"))},
            "OPENAI_BASE_URL": fake.base_url,
            "OTEL_EXPORTER_OTLP_ENDPOINT": proxy.url,
            "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{project_key.key}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_METRICS_EXPORTER": "none",
            "AGENT_SERVICE_NAME": "node-resent",
            "AGENT_CAPTURE_CONTENT": "1",
        }
        done = subprocess.run(
            ["node", str(node_agent)],
            cwd=node_agent.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    batched = _details(client, project_key)["node-resent"]
    assert [c["system_prompt"] for c in batched] == [SYSTEM_PROMPT]
    if not resends_on(app, NODE_RESEND_ON):
        return
    fresh = add_project_key(app, "resent")
    requests = split_newest_first(proxy.requests)
    assert sum(1 for path, _, _ in requests if path.endswith("/logs")) >= 4
    for _ in range(2):
        for path, content_type, body in requests:
            answer = client.post(
                path, data=body, headers={**fresh.headers, "Content-Type": content_type}
            )
            assert answer.status_code == 200, answer.data[:500]
    resent = _details(client, fresh)["node-resent"]
    assert [c["system_prompt"] for c in resent] == [SYSTEM_PROMPT]
    assert end_state(resent) == end_state(batched)
