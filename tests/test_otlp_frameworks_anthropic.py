"""The Anthropic SDK 2.x for real (issue 21): its own tracing alone, and with OpenLLMetry's or
OpenInference's Anthropic instrumentation installed beside it, against the fake Messages server
(streamed and not), exported over OTLP/HTTP (protobuf and JSON) to a live Toolscope. Each run is
the framework scenario of OTLP_FRAMEWORKS.md, and must come out whole: one model call is one
round whoever reports it (docs/otlp-mapping.md, 'One model call, one round'). Then the same
capture, one span per request, newest first and twice, must end in the same state (on SQLite:
item 4 runs on one database per family, tests/otlp_frameworks_support.py).

The family's virtualenv: tests/otlp_agents/families/anthropic.txt (venvs.family_python).
"""

from __future__ import annotations

import pytest

from tests.otlp_agents.fake_anthropic import FakeAnthropic
from tests.otlp_agents.venvs import family_python
from tests.otlp_frameworks_support import (
    AGENTS,
    FrameworkRun,
    run_and_check,
)

CONTENT = {"ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE": "content"}
# (label, arguments, wire, environment, conversation id)
RUNS = [
    ("sdk", ("--instrumentation", "none"), "protobuf", CONTENT, "c-anthropic"),
    ("sdk-stream-json", ("--instrumentation", "none", "--stream"), "json", CONTENT, None),
    # The instrumentations' content is on by default; the SDK's stays off (its default) or on.
    ("openllmetry", ("--instrumentation", "openllmetry"), "protobuf", {}, None),
    ("openllmetry-stream", ("--instrumentation", "openllmetry", "--stream"), "json", CONTENT, None),
    ("openinference", ("--instrumentation", "openinference"), "json", {}, None),
    (
        "openinference-stream",
        ("--instrumentation", "openinference", "--stream"),
        "protobuf",
        CONTENT,
        None,
    ),
]


@pytest.fixture(scope="module")
def anthropic_python():
    return family_python("anthropic")


def test_anthropic_sdk_with_and_without_instrumentations_comes_out_whole(
    anthropic_python, app, live_server, client, project_key
):
    fakes = [FakeAnthropic().__enter__() for _ in RUNS]
    runs = [
        FrameworkRun(
            label=f"anthropic-{label}",
            command=[str(anthropic_python), str(AGENTS / "agent_anthropic.py"), *arguments],
            fake=fake,
            wire=wire,
            env=env,
            conversation=conversation,
            native="anthropic",
        )
        for (label, arguments, wire, env, conversation), fake in zip(RUNS, fakes, strict=True)
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
