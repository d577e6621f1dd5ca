"""docs/otlp.md promises that each set-up block is the whole change to an agent. Each block with
a `pip install` or `npm install` line is taken at its word: the line is run as written (bash,
the virtualenv's `pip` first on PATH, or npm in a directory of its own) into a fresh virtualenv
or node_modules, built once and reused while the line is unchanged (as the producers' one is,
tests/test_otlp_producers.py); its `export` lines become the environment; its code runs (after
the shared TracerProvider set-up when it says "as above") in the agent of its family: a small
OpenAI tool loop (the instrumentations of the OpenAI SDK, in Python and in Node), a
pydantic-ai agent or an Agent Framework agent with the same two tools, against a fake OpenAI,
exporting to a live Toolscope. The conversation must arrive whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from shared_setup import one_at_a_time

from tests.otlp_agents.fake_openai import FINAL_TEXT, FakeOpenAI
from tests.otlp_agents.tools import SYSTEM_PROMPT, USER_PROMPT

ROOT = Path(__file__).resolve().parent.parent
OTLP_DOC = ROOT / "docs" / "otlp.md"
AGENTS = Path(__file__).parent / "otlp_agents"
IN_CI = os.environ.get("CI") == "true"
TITLE = re.compile(r"^\*\*(.+?)\*\*$", re.MULTILINE)
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# The agent the block is added to: the tool loop of the producer tests, with the SDK's defaults
# (OPENAI_BASE_URL, OPENAI_API_KEY from the environment).
AGENT = f"""
import sys
sys.path.insert(0, {str(AGENTS)!r})
from openai import OpenAI
from tools import run_chat_loop


def run_agent():
    run_chat_loop(OpenAI())
"""


# The agents the blocks of the other families are added to: the framework's own agent with the
# same two tools, the model at the SDK's defaults (OPENAI_BASE_URL, OPENAI_API_KEY).
TOOLS_IMPORT = f"""
import sys
sys.path.insert(0, {str(AGENTS)!r})
from tools import SYSTEM_PROMPT, USER_PROMPT, get_time, get_weather
"""
AGENT_FRAMEWORK_RUN = """
import asyncio
from agent_framework import Agent
from agent_framework.openai import OpenAIChatCompletionClient

asyncio.run(Agent(client=OpenAIChatCompletionClient("gpt-4o-mini"), name="weather_agent",
                  instructions=SYSTEM_PROMPT, tools=[get_weather, get_time]).run(USER_PROMPT))
"""
# The Node block's agent: tests/otlp_agents/node/agent.js's tool loop, after the block.
NODE_AGENT = f"""
const OpenAI = require("openai");
const tools = {{
  get_weather: ({{ city }}) => JSON.stringify({{ city, forecast: "sunny", celsius: 21 }}),
  get_time: ({{ city }}) => JSON.stringify({{ city, time: "14:05" }}),
}};
const definitions = Object.keys(tools).map((name) => ({{
  type: "function",
  function: {{ name, description: `${{name}} for a city.`,
    parameters: {{ type: "object", properties: {{ city: {{ type: "string" }} }},
                  required: ["city"] }} }},
}}));
async function runAgent() {{
  const client = new OpenAI();
  const messages = [{{ role: "system", content: {json.dumps(SYSTEM_PROMPT)} }},
                    {{ role: "user", content: {json.dumps(USER_PROMPT)} }}];
  for (let i = 0; i < 4; i += 1) {{
    const response = await client.chat.completions.create(
      {{ model: "gpt-4o-mini", messages, tools: definitions }});
    const message = response.choices[0].message;
    if (!message.tool_calls || message.tool_calls.length === 0) break;
    messages.push(
      {{ role: "assistant", content: message.content, tool_calls: message.tool_calls }});
    for (const call of message.tool_calls) {{
      messages.push({{ role: "tool", tool_call_id: call.id,
                      content: tools[call.function.name](JSON.parse(call.function.arguments)) }});
    }}
  }}
}}
runAgent().catch((error) => {{ console.error(error); process.exit(1); }});
"""

# The families this test runs, by the start of their title, and the agent each is added to.
# (A family added to the doc gets its agent here; until then its block is not run.)
FAMILIES = {
    "opentelemetry contrib": "openai",
    "openllmetry": "openai",
    "openinference": "openai",
    "pydantic-ai": "pydantic-ai",
    "microsoft agent framework": "agent-framework",
    "node": "node",
}


@dataclass
class DocBlock:
    title: str
    install: str  # the pip or npm command, continuation lines joined
    env: dict[str, str]
    code: str  # Python, or JavaScript for an npm block

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")[:40]

    @property
    def family(self) -> str:
        return next(v for k, v in FAMILIES.items() if self.title.lower().startswith(k))

    @property
    def pip(self) -> str:
        return self.install


def doc_blocks() -> list[DocBlock]:
    """The families of 'Set-up per family' this test knows that say what to install, in the
    doc's order."""
    text = OTLP_DOC.read_text()
    section = text[text.index("### Set-up per family") :]
    section = section[: section.index("\n### ", 1)]
    found = []
    titles = list(TITLE.finditer(section))
    for n, title in enumerate(titles):
        if not any(title.group(1).lower().startswith(k) for k in FAMILIES):
            continue
        end = titles[n + 1].start() if n + 1 < len(titles) else len(section)
        blocks = BLOCK.findall(section[title.end() : end])
        shell = "\n".join(body for lang, body in blocks if lang == "bash")
        code = "\n".join(body for lang, body in blocks if lang in ("python", "js"))
        lines = shell.replace("\\\n", " ").splitlines()
        install = [line for line in lines if line.startswith(("pip install", "npm install"))]
        if not install:
            continue
        env = {}
        for line in lines:
            if line.startswith("export "):
                name, _, value = line[len("export ") :].split("#")[0].strip().partition("=")
                env[name] = value
        (line,) = install
        found.append(DocBlock(title.group(1), line, env, code))
    return found


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def _venv_home(block: DocBlock) -> Path:
    home = Path(sys.prefix) / f"otlp-docs-{block.slug}"
    if not os.access(sys.prefix, os.W_OK):
        home = ROOT / "test-artifacts" / f"otlp-docs-{block.slug}"
    return home


def _build(block: DocBlock) -> Path:
    """A fresh virtualenv with the block's pip line run in it (cached by the line's text), or
    for an npm line a directory with its node_modules; the python or node to run with."""
    if block.family == "node":
        return _build_npm(block)
    home = _venv_home(block)
    python = home / "bin" / "python"
    stamp = home / "pip-line.sha256"
    wanted = hashlib.sha256(block.pip.encode()).hexdigest()
    with one_at_a_time(home):  # the other xdist worker may be building it
        if python.exists() and stamp.exists() and stamp.read_text() == wanted:
            return python
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, capture_output=True)
        env = {**os.environ, "PATH": f"{home / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        env.pop("PYTHONPATH", None)
        done = subprocess.run(
            ["bash", "-c", f"{block.pip} --quiet --disable-pip-version-check"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            _unavailable(f"{block.title}: {block.pip} failed: {done.stderr[-2000:]}")
        stamp.write_text(wanted)
    return python


def _build_npm(block: DocBlock) -> Path:
    """The block's npm line run as written in a directory of its own (cached by its text)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed for the Node block")
    home = _venv_home(block)
    stamp = home / "npm-line.sha256"
    wanted = hashlib.sha256(block.install.encode()).hexdigest()
    with one_at_a_time(home):
        if stamp.exists() and stamp.read_text() == wanted:
            return Path(node)  # type: ignore[arg-type]
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        (home / "package.json").write_text('{"private": true}\n')
        done = subprocess.run(
            ["bash", "-c", f"{block.install} --no-audit --no-fund --loglevel=error"],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            _unavailable(f"{block.title}: {block.install} failed: {done.stderr[-2000:]}")
        stamp.write_text(wanted)
    return Path(node)  # type: ignore[arg-type]


def _script(block: DocBlock, setup: str) -> str:
    code = block.code
    if block.family == "node":
        return code + "\n" + NODE_AGENT
    # The doc's conversation id, one per block: they all export to the same server at once.
    code = code.replace('"conversation-42"', f'"docs-{block.slug}"')
    if "set-up as above" in code:
        code = setup + "\n" + code
    if block.family == "pydantic-ai":
        # The block's agent gets the two tools and the user's question ("...").
        run = 'agent.run_sync("...",'
        assert run in code, f"{block.title}: no {run} in the block"
        tools = "agent.tool_plain(get_weather)\nagent.tool_plain(get_time)\n"
        return TOOLS_IMPORT + code.replace(run, tools + "agent.run_sync(USER_PROMPT,")
    if block.family == "agent-framework":
        return TOOLS_IMPORT + code + "\n" + AGENT_FRAMEWORK_RUN
    if "run_agent()" in code:  # the block runs the agent itself (inside its session)
        return AGENT + "\n" + code
    return code + "\n" + AGENT + "\nrun_agent()\n"


def _setup(blocks: list[DocBlock]) -> str:
    """The TracerProvider set-up of the first block, which the others refer to "as above"."""
    lines = blocks[0].code.splitlines()
    return "\n".join(
        line for line in lines if "openai_v2" not in line and "OpenAIInstrumentor" not in line
    )


def test_the_doc_gives_every_install_line_the_pins_the_producer_tests_use():
    pins = {}
    for line in (AGENTS / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    package = json.loads((AGENTS / "node" / "package.json").read_text())
    blocks = doc_blocks()
    assert sorted({b.family for b in blocks}) == sorted(set(FAMILIES.values()))
    assert len(blocks) == len(FAMILIES)
    for block in blocks:
        if block.family == "node":
            for requirement in shlex.split(block.install)[2:]:
                name, _, version = requirement.rpartition("@")
                assert package["dependencies"].get(name) == version, f"{block.title}: {requirement}"
            continue
        for requirement in shlex.split(block.pip)[2:]:
            name, _, version = requirement.partition("==")
            assert pins.get(name) == version, f"{block.title}: {requirement}"


def test_each_set_up_block_installed_as_written_sends_the_conversation(
    live_server, client, project_key
):
    blocks = doc_blocks()
    with ThreadPoolExecutor(max_workers=3) as pool:
        pythons = list(pool.map(_build, blocks))
    setup = _setup(blocks)

    def run(block: DocBlock, python: Path) -> str:
        with FakeOpenAI() as fake:
            env = {
                **{
                    k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TOOLSCOPE_"))
                },
                **block.env,
                "OPENAI_BASE_URL": fake.base_url,
                "OPENAI_API_KEY": "sk-test",
                "OTEL_EXPORTER_OTLP_ENDPOINT": live_server,
                "OTEL_EXPORTER_OTLP_HEADERS": f"Authorization=Bearer%20{project_key.key}",
                "OTEL_SERVICE_NAME": f"docs-{block.slug}",
            }
            env.pop("PYTHONPATH", None)
            if block.family == "node":
                script = _venv_home(block) / "docs-agent.js"
                script.write_text(_script(block, setup))
                command, cwd = [str(python), str(script)], script.parent
            else:
                command, cwd = [str(python), "-c", _script(block, setup)], None
            done = subprocess.run(
                command, env=env, cwd=cwd, capture_output=True, text=True, timeout=180
            )
        assert done.returncode == 0, f"{block.title}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        return block.slug

    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(run, blocks, pythons))

    listing = client.get("/api/v1/conversations?limit=100", headers=project_key.headers)
    by_service = {}
    for item in listing.get_json()["data"]:
        detail = client.get(f"/api/v1/conversations/{item['id']}", headers=project_key.headers)
        detail = detail.get_json()
        by_service.setdefault(detail["metadata"].get("otel.service.name"), []).append(detail)
    failures = []
    for block in blocks:
        found = by_service.get(f"docs-{block.slug}", [])
        try:
            assert len(found) == 1, f"{len(found)} conversations"
            user, assistant = found[0]["messages"]
            assert (user["role"], user["content"]) == ("user", USER_PROMPT)
            assert (assistant["content"], assistant["status"]) == (FINAL_TEXT, "completed")
            calls = sorted(assistant["tool_calls"], key=lambda c: c["sequence_index"])
            assert [c["name"] for c in calls] == ["get_weather", "get_time"]
            assert all(c["response"] and c["arguments"] == {"city": "Paris"} for c in calls)
        except (AssertionError, ValueError, KeyError) as exc:
            failures.append(f"{block.title}: {exc!r}"[:2000])
    assert not failures, "\n".join(failures)
