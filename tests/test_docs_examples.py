"""A newcomer follows the docs in order on `make run`'s demo project: the README's API examples,
then docs/api.md's, then docs/client.md's, each run as written against a live server loaded with
the demo data. Only the documented placeholders are replaced: the server's address
(`http://127.0.0.1:8000`, `http://localhost:8000`) and the key (`ts_...`). Every request must
answer as the doc says (success: no 409 for an id an earlier example took, no 404 for an id of
another project), and the examples must leave the demo as they found it (its channels' windows).

The shell examples run in bash with the real curl, one script per doc so that `export TS=...`
carries over as it does in a terminal; the client's Python examples run in one interpreter,
against a fake OpenAI server on loopback. docs/api.md's `unique_sdk` snippets are not run: the
SDK is not a dependency of Toolscope (its own tests drive the MessageTool API).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import add_project_key

from tests.otlp_agents.fake_openai import FINAL_TEXT, FakeOpenAI
from webapp.demo import load_demo

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "api.md", ROOT / "docs" / "client.md"]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
PLACEHOLDER_URLS = ("http://127.0.0.1:8000", "http://localhost:8000")
# Every curl of a doc reports its answer on stderr (a later --write-out replaces the doc's own).
WRITE_OUT = "'%{stderr}TSDOC %{http_code} %{method} %{url_effective}\\n'"
CURL = 'curl() { command curl "$@" -w ' + WRITE_OUT + "; }"


def blocks(doc: Path, language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(doc.read_text()) if lang == language]


def api_examples(doc: Path) -> list[str]:
    """The shell blocks that talk to the API (`$TS`), in the doc's order."""
    return [b for b in blocks(doc, "sh") if "$TS" in b or "export TS=" in b]


def python_examples(doc: Path) -> list[str]:
    return [b for b in blocks(doc, "python") if "unique_sdk" not in b]


def fill_in(text: str, base_url: str, key: str) -> str:
    for placeholder in PLACEHOLDER_URLS:
        text = text.replace(placeholder, base_url)
    return text.replace("ts_...", key)


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TOOLSCOPE_", "OTEL_"))},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
    }


def run_shell(doc: Path, base_url: str, key: str, cwd: Path) -> list[tuple[int, str]]:
    script = "\n".join(["set -e", CURL, *(fill_in(b, base_url, key) for b in api_examples(doc))])
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{doc.name}: {done.stderr[-3000:]}"
    answers = []
    for line in done.stderr.splitlines():
        if line.startswith("TSDOC "):
            _tag, status, method, url = line.split(" ", 3)
            answers.append((int(status), f"{method} {url}"))
    return answers


def _channels(client, key) -> dict[str, object]:
    listing = client.get("/api/v1/channels", headers=key.headers).get_json()
    return {c["name"]: c["freshness_seconds"] for c in listing["data"]}


def test_readme_api_and_client_examples_run_in_order_on_the_demo(
    app, client, live_server, tmp_path
):
    # Another project came first and has a rule: ids of this project's rules do not start at 1.
    other = add_project_key(app, "other")
    rule = {"name": "other", "kind": "skip", "function_name": "nothing"}
    created = client.post("/api/v1/redaction-rules", json=rule, headers=other.headers)
    assert created.status_code == 201
    load_demo(app, "default")
    key = add_project_key(app, "default")
    demo_channels = _channels(client, key)
    assert demo_channels["support-bot"] == 45 * 86400

    for doc in DOCS[:2]:
        answers = run_shell(doc, live_server, key.key, tmp_path)
        curls = sum(len(re.findall(r"(?m)(?:^|\$\()curl ", b)) for b in api_examples(doc))
        assert len(answers) == curls >= 5, (doc.name, answers)
        wrong = [(s, r) for s, r in answers if not 200 <= s < 300]
        assert not wrong, f"{doc.name}: requests that did not succeed: {wrong}"
        deletes = [s for s, r in answers if r.startswith("DELETE ")]
        assert set(deletes) <= {204}, (doc.name, answers)

    # The examples add their own channel; the demo's keep their windows.
    after = _channels(client, key)
    assert {name: after[name] for name in demo_channels} == demo_channels

    script = "\n\n".join(fill_in(b, live_server, key.key) for b in python_examples(DOCS[2]))
    script += (
        "\n\ntoolscope.close()\n"
        "assert (toolscope.rejected, toolscope.dropped, toolscope.pending) == (0, 0, 0), (\n"
        "    toolscope.rejected, toolscope.dropped, toolscope.pending)\n"
    )
    with FakeOpenAI() as fake:
        env = {**_env(tmp_path), "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-test"}
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, f"client.md: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    assert done.stdout.splitlines() == [FINAL_TEXT, FINAL_TEXT]  # both loops' answers
    cids = set(re.findall(r'run_turn\w*\("([^"]+)"', "\n".join(python_examples(DOCS[2]))))
    assert len(cids) == 1, cids
    (cid,) = cids
    detail = client.get(f"/api/v1/conversations/{cid}", headers=key.headers).get_json()
    assistants = [m for m in detail["messages"] if m["role"] == "assistant"]
    assert [(m["content"], m["status"]) for m in assistants] == [(FINAL_TEXT, "completed")] * 2
    # The first question made the model call tools; the follow-up it answered from the history.
    calls = assistants[0]["tool_calls"]
    assert calls and all(c["response"] for c in calls)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_the_examples_are_found(doc):
    """The extraction above sees what the docs show (a reformatted block would be left out)."""
    if doc.name == "client.md":
        assert len(python_examples(doc)) == 3
    else:
        assert len(api_examples(doc)) >= 1
