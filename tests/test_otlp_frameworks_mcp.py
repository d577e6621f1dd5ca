"""MCP calls from real producers (issue 21, items 2 to 4; docs/otlp-mapping.md, 'MCP calls'):
an OpenAI SDK agent loop whose tools live on an MCP server over stdio (tests/otlp_agents/
agent_mcp.py, mcp_server.py), against the fake OpenAI server, exporting through the producers'
own OTLP exporters to a live Toolscope:

- mcp 2.x with its native spans (client and server, the server exporting under its own service
  name), the model calls traced by OTel contrib openai-v2;
- mcp 1.x with OpenLLMetry's opentelemetry-instrumentation-mcp (its own virtualenv: it fails to
  import on mcp 2.x), the model calls traced by OpenLLMetry's openai instrumentation;

each bare (every model call and every MCP call a trace of its own) and wrapped in an agent span.
Toolscope must make one conversation of each run with the model's calls only, each with its
MCP details and its result; the same spans sent one per request, newest first and twice, must
end in the same state (on PostgreSQL only: item 4 runs on one database per family,
tests/otlp_frameworks_support.py, `resends_on`).
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from tests.otlp_agents.capture import RecordingProxy, split_newest_first
from tests.otlp_agents.fake_openai import FINAL_TEXT, USAGE_FIRST, USAGE_SECOND, FakeOpenAI
from tests.otlp_agents.tools import USER_PROMPT, get_time, get_weather
from tests.otlp_agents.venvs import family_python
from tests.otlp_frameworks_support import resends_on
from webapp.db import db
from webapp.models import Conversation, McpCall, Message, ToolInvocation

AGENTS = Path(__file__).parent / "otlp_agents"
AGENT_TIMEOUT = 240
RESEND_ON = "postgresql"  # item 4's database (tests/otlp_frameworks_support.py, resends_on)


@dataclass
class Run:
    label: str
    family: str  # v1 | v2
    wrapped: bool = False
    wire: str = "protobuf"
    fake: Any = None
    output: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def service(self) -> str:
        return f"mcp-agent-{self.label}"

    @property
    def server(self) -> str:
        return f"weather-mcp-{self.label}"


RUNS = [
    Run("v2", "v2"),
    Run("v2-wrapped", "v2", wrapped=True, wire="json"),
    Run("v1", "v1"),
    Run("v1-wrapped", "v1", wrapped=True),
]


def _run_agent(run: Run, python: Path, endpoint: str, key: str) -> Run:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLSCOPE_"))},
        "OPENAI_BASE_URL": run.fake.base_url,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{key}",
        "OTEL_METRICS_EXPORTER": "none",
        "OTLP_WIRE": run.wire,
        "AGENT_SERVICE_NAME": run.service,
        "MCP_SERVER_SERVICE_NAME": run.server,
        "AGENT_CONVERSATION_ID": f"c-{run.label}",
        **run.extra,
    }
    command = [str(python), str(AGENTS / "agent_mcp.py"), "--family", run.family]
    if run.wrapped:
        command.append("--wrapped")
    done = subprocess.run(
        command, cwd=AGENTS, env=env, capture_output=True, text=True, timeout=AGENT_TIMEOUT
    )
    run.output = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, f"{run.label} failed:\n{run.output}"
    return run


def _conversations(client, key) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    listing = client.get("/api/v1/conversations?limit=100", headers=key.headers).get_json()
    for item in listing["data"]:
        detail = client.get(f"/api/v1/conversations/{item['id']}", headers=key.headers)
        detail = detail.get_json()
        out.setdefault(detail["metadata"].get("otel.service.name"), []).append(detail)
    return out


def _mcp_rows(app, project_id: int) -> dict[tuple[str, str], dict[str, Any]]:
    """The MCP details of the project's calls, by (conversation, the model's call id)."""
    with app.app_context():
        rows = db.session.execute(
            select(Conversation.external_id, ToolInvocation.external_tool_call_id, McpCall)
            .join(McpCall, McpCall.tool_invocation_id == ToolInvocation.id)
            .join(Message, Message.id == ToolInvocation.message_id)
            .join(Conversation, Conversation.id == Message.conversation_id)
            .where(ToolInvocation.project_id == project_id)
        ).all()
        return {
            (conversation, call_id): {
                c.name: getattr(row, c.name)
                for c in McpCall.__table__.columns
                if c.name != "tool_invocation_id"
            }
            for conversation, call_id, row in rows
        }


def _check(run: Run, found: list[dict], mcp_rows: dict[str, dict[str, Any]]) -> None:
    assert len(found) == 1, f"{len(found)} conversations"
    conversation = found[0]
    user, assistant = conversation["messages"]
    assert (user["role"], user["content"]) == ("user", USER_PROMPT)
    assert (assistant["content"], assistant["status"]) == (FINAL_TEXT, "completed")
    # The model's calls, no more: the MCP spans are not calls of their own.
    calls = sorted(assistant["tool_calls"], key=lambda c: (c["round_index"], c["sequence_index"]))
    assert [(c["round_index"], c["id"], c["name"]) for c in calls] == [
        (0, "call_weather_1", "get_weather"),
        (0, "call_time_1", "get_time"),
    ]
    assert [c["arguments"] for c in calls] == [{"city": "Paris"}, {"city": "Paris"}]
    assert [json.loads(c["response"]["content"]) for c in calls] == [
        json.loads(get_weather("Paris")),
        json.loads(get_time("Paris")),
    ]
    usage = sorted(assistant["usage"], key=lambda u: u["round_index"])
    assert [(u["input_tokens"], u["output_tokens"]) for u in usage] == [
        (USAGE_FIRST["prompt_tokens"], USAGE_FIRST["completion_tokens"]),
        (USAGE_SECOND["prompt_tokens"], USAGE_SECOND["completion_tokens"]),
    ]
    for call in calls:
        details = mcp_rows.get((conversation["id"], call["id"]))
        assert details is not None, f"{call['id']} has no MCP details"
        assert details["method"] == "tools/call"
        assert details["duration_ms"] is not None and details["duration_ms"] > 0
        assert details["error_type"] is None
        if run.family == "v2":
            # Both sides seen: the server's own service name, its JSON-RPC id and protocol.
            assert details["server"] == run.server
            assert details["request_id"] and details["request_id"].isdigit()
            assert details["protocol_version"]
            assert details["server_duration_ms"] is not None
            assert details["server_duration_ms"] <= details["duration_ms"]


def _state(client, key) -> Any:
    """What a user sees of the project, token counts left out (the background pass fills them
    later)."""
    out = []
    for service, found in sorted(_conversations(client, key).items(), key=lambda i: str(i[0])):
        for conversation in found:
            messages = []
            for message in conversation["messages"]:
                calls = [
                    (
                        c["round_index"],
                        c["sequence_index"],
                        c["id"],
                        c["name"],
                        c["arguments"],
                        (c["response"] or {}).get("content"),
                        c.get("is_error"),
                    )
                    for c in message.get("tool_calls") or ()
                ]
                messages.append((message["role"], message["content"], sorted(calls, key=str)))
            out.append((service, conversation["id"], messages))
    return out


def test_mcp_producers_attach_each_mcp_call_to_the_models_call(
    app, live_server, client, project_key, other_project_key
):
    pythons = {"v2": family_python("mcp2"), "v1": family_python("mcp1")}
    fakes = [FakeOpenAI() for _ in RUNS]
    for run, fake in zip(RUNS, fakes, strict=True):
        run.fake = fake.__enter__()
    try:
        with RecordingProxy(live_server) as proxy, ThreadPoolExecutor(max_workers=2) as pool:
            list(
                pool.map(
                    lambda run: _run_agent(run, pythons[run.family], proxy.url, project_key.key),
                    RUNS,
                )
            )
    finally:
        for fake in fakes:
            fake.__exit__(None, None, None)

    conversations = _conversations(client, project_key)
    mcp_rows = _mcp_rows(app, project_key.project_id)
    failures = []
    for run in RUNS:
        try:
            _check(run, conversations.get(run.service, []), mcp_rows)
        except (AssertionError, KeyError, ValueError) as exc:
            failures.append(f"{run.label}: {exc!r}"[:3000])
    assert not failures, "\n".join(failures)
    # The servers seen: the MCP servers page counts each run's server with its two tools.
    assert {r["server"] for r in mcp_rows.values()} >= {r.server for r in RUNS if r.family == "v2"}
    if not resends_on(app, RESEND_ON):
        return

    # Item 4: the same spans, one per request, newest first, twice, end in the same state.
    split = split_newest_first(proxy.requests)
    assert len(split) > 20
    for _ in range(2):
        for path, content_type, body in split:
            answer = client.post(
                path,
                data=body,
                headers={
                    "Content-Type": content_type,
                    "Authorization": f"Bearer {other_project_key.key}",
                },
            )
            assert answer.status_code == 200, answer.get_data(as_text=True)
    assert _state(client, other_project_key) == _state(client, project_key)
    assert _mcp_rows(app, other_project_key.project_id) == {
        key: {**row, "project_id": other_project_key.project_id} for key, row in mcp_rows.items()
    }
