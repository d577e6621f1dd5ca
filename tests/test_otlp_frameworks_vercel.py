"""The Vercel AI SDK for real (issue 21): `generateText` and `streamText` with two tools and
several steps (`stopWhen: stepCountIs(5)`), `experimental_telemetry` on, the OpenAI provider's
Chat Completions model against the fake OpenAI server (streamed for `streamText`), exported by
the Node SDK's OTLP/HTTP exporters in JSON and protobuf to a live Toolscope. Each run is the
framework scenario of OTLP_FRAMEWORKS.md and must come out whole
(docs/otlp-mapping.md, 'The Vercel AI SDK'), with the session id from `ai.telemetry.metadata`
when the agent sets one; then the same capture, one span per request, newest first and twice,
must end in the same state (on PostgreSQL: item 4 runs on one database per family,
tests/otlp_frameworks_support.py).

The agent: tests/otlp_agents/node/vercel (package-lock.json pinned, `npm ci`).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest
from shared_setup import one_at_a_time

from tests.otlp_agents.fake_openai import FakeOpenAI
from tests.otlp_agents.venvs import unavailable
from tests.otlp_frameworks_support import (
    AGENTS,
    FrameworkRun,
    run_and_check,
)

VERCEL = AGENTS / "node" / "vercel"
# (label, streamText?, wire, metadata key, session id)
RUNS = [
    ("generate-json", False, "json", "sessionId", "c-vercel-session"),
    ("generate-protobuf", False, "protobuf", None, None),
    ("stream-json", True, "json", None, None),
    ("stream-protobuf", True, "protobuf", "conversationId", "c-vercel-conversation"),
]


@pytest.fixture(scope="module")
def vercel_agent() -> Path:
    """The agent with its pinned npm packages installed (`npm ci`)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        unavailable("node and npm are needed for the Vercel AI SDK agent")
    stamp = VERCEL / "node_modules" / ".toolscope-lock.sha256"
    wanted = hashlib.sha256((VERCEL / "package-lock.json").read_bytes()).hexdigest()
    with one_at_a_time(VERCEL / "node_modules"):  # the other xdist worker may be building it
        if not (stamp.exists() and stamp.read_text() == wanted):
            build = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=VERCEL,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if build.returncode != 0:
                unavailable(f"cannot install the Vercel AI SDK agent: {build.stderr[-2000:]}")
            stamp.write_text(wanted)
    return VERCEL / "agent.mjs"


def test_vercel_ai_sdk_agents_come_out_whole(vercel_agent, app, live_server, client, project_key):
    fakes = [FakeOpenAI().__enter__() for _ in RUNS]
    runs = []
    for (label, stream, wire, metadata_key, session), fake in zip(RUNS, fakes, strict=True):
        env = {"AGENT_STREAM": "1" if stream else "0"}
        if metadata_key:
            env["AGENT_SESSION_KEY"] = metadata_key
        runs.append(
            FrameworkRun(
                label=f"vercel-{label}",
                command=["node", str(vercel_agent)],
                fake=fake,
                wire=wire,
                env=env,
                conversation=session,
                cwd=VERCEL,
            )
        )

    def exported_its_wire(run: FrameworkRun) -> None:
        wires = {"json" if "json" in c.content_type else "protobuf" for c in run.captured}
        assert wires == {run.wire}, wires

    run_and_check(
        runs,
        fakes,
        endpoint=live_server,
        client=client,
        project_key=project_key,
        app=app,
        resend_on="postgresql",  # item 4 (tests/otlp_frameworks_support.py, resends_on)
        workers=2,
        also=exported_its_wire,
    )
