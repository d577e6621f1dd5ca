"""Google ADK and Strands Agents for real (issue 21), each with its own OpenTelemetry spans,
against the fake OpenAI server, exported over OTLP/HTTP to a live Toolscope:

- ADK 2.x with LiteLLM (`openai/gpt-4o-mini`), content on
  (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`): content in
  `gen_ai.client.inference.operation.details` log records, the session id as
  `gen_ai.conversation.id`, and an `execute_tool (merged)` span that is not a call
  (docs/otlp-mapping.md, 'Execution spans that are not calls');
- Strands with its OpenAI model provider (streamed Chat Completions), at its default
  conventions and with `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`: content in
  span events (docs/otlp-mapping.md, 'Span events read as log records') with Bedrock Converse
  blocks, no conversation id (the second run carries the first's calls in its history).

Each run is the framework scenario of OTLP_FRAMEWORKS.md and must come out whole; then the same
capture, one span or log record per request, newest first and twice, must end in the same state
(on SQLite: item 4 runs on one database per family, tests/otlp_frameworks_support.py).
The families' virtualenvs: tests/otlp_agents/families/adk.txt and strands.txt.
"""

from __future__ import annotations

import pytest

from tests.otlp_agents.fake_openai import FakeOpenAI
from tests.otlp_agents.venvs import family_python
from tests.otlp_frameworks_support import (
    AGENTS,
    FrameworkRun,
    run_and_check,
)

LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
# (label, family, script, wire, environment, conversation id); ADK pins opentelemetry 1.44,
# which has no OTLP/JSON exporter.
RUNS = [
    (
        "adk",
        "adk",
        "agent_adk.py",
        "protobuf",
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
        "c-adk",
    ),
    ("strands", "strands", "agent_strands.py", "protobuf", {}, None),
    ("strands-latest-json", "strands", "agent_strands.py", "json", LATEST, None),
]


@pytest.fixture(scope="module")
def pythons():
    return {family: family_python(family) for family in ("adk", "strands")}


def test_adk_and_strands_agents_come_out_whole(pythons, app, live_server, client, project_key):
    fakes = [FakeOpenAI().__enter__() for _ in RUNS]
    runs = [
        FrameworkRun(
            label=label,
            command=[str(pythons[family]), str(AGENTS / script)],
            fake=fake,
            wire=wire,
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
            conversation=conversation,
        )
        for (label, family, script, wire, env, conversation), fake in zip(RUNS, fakes, strict=True)
    ]
    run_and_check(
        runs,
        fakes,
        endpoint=live_server,
        client=client,
        project_key=project_key,
        app=app,
        resend_on="sqlite",  # item 4 (tests/otlp_frameworks_support.py, resends_on)
        workers=3,
    )
