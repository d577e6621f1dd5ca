"""docs/otlp.md promises that each set-up block is the whole change to an agent that calls
OpenAI. Each block with a `pip install` line is taken at its word: the line is run as written
(bash, the virtualenv's `pip` first on PATH) into a fresh virtualenv of its own, built once and
reused while the line is unchanged (as the producers' one is, tests/test_otlp_producers.py); its
`export` lines become the environment; its Python runs (after the shared TracerProvider set-up
when it says "as above"), followed by a small OpenAI tool loop against a fake OpenAI server,
exporting to a live Toolscope. The conversation must arrive whole.
"""

from __future__ import annotations

import hashlib
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
from tests.otlp_agents.tools import USER_PROMPT

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


@dataclass
class DocBlock:
    title: str
    pip: str  # the pip command, continuation lines joined
    env: dict[str, str]
    code: str

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")[:40]


def doc_blocks() -> list[DocBlock]:
    """The families of 'Set-up per family' that say what to install, in the doc's order."""
    text = OTLP_DOC.read_text()
    section = text[text.index("### Set-up per family") :]
    section = section[: section.index("\n### ", 1)]
    found = []
    titles = list(TITLE.finditer(section))
    for n, title in enumerate(titles):
        end = titles[n + 1].start() if n + 1 < len(titles) else len(section)
        blocks = BLOCK.findall(section[title.end() : end])
        shell = "\n".join(body for lang, body in blocks if lang == "bash")
        code = "\n".join(body for lang, body in blocks if lang == "python")
        if "pip install" not in shell:
            continue
        lines = shell.replace("\\\n", " ").splitlines()
        (pip,) = [line for line in lines if line.startswith("pip install")]
        env = {}
        for line in lines:
            if line.startswith("export "):
                name, _, value = line[len("export ") :].split("#")[0].strip().partition("=")
                env[name] = value
        found.append(DocBlock(title.group(1), pip, env, code))
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
    """A fresh virtualenv with the block's pip line run in it (cached by the line's text)."""
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


def _script(block: DocBlock, setup: str) -> str:
    code = block.code
    if "set-up as above" in code:
        code = setup + "\n" + code
    if "run_agent()" in code:  # the block runs the agent itself (inside its session)
        return AGENT + "\n" + code
    return code + "\n" + AGENT + "\nrun_agent()\n"


def _setup(blocks: list[DocBlock]) -> str:
    """The TracerProvider set-up of the first block, which the others refer to "as above"."""
    lines = blocks[0].code.splitlines()
    return "\n".join(
        line for line in lines if "openai_v2" not in line and "OpenAIInstrumentor" not in line
    )


def test_the_doc_gives_every_pip_line_the_pins_the_producer_tests_use():
    pins = {}
    for line in (AGENTS / "requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip()] = version.strip()
    blocks = doc_blocks()
    assert [b.slug[:8] for b in blocks] == ["opentele", "openllme", "openinfe"]
    for block in blocks:
        for requirement in shlex.split(block.pip)[2:]:
            name, _, version = requirement.partition("==")
            assert pins.get(name) == version, f"{block.title}: {requirement}"


def test_each_set_up_block_installed_as_written_sends_the_conversation(
    live_server, client, project_key
):
    blocks = doc_blocks()
    with ThreadPoolExecutor(max_workers=len(blocks)) as pool:
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
            done = subprocess.run(
                [str(python), "-c", _script(block, setup)],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
        assert done.returncode == 0, f"{block.title}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        return block.slug

    with ThreadPoolExecutor(max_workers=len(blocks)) as pool:
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
