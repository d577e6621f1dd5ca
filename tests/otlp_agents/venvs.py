"""One virtualenv per producer family (issue 21): the frameworks' pins conflict with each other
and with the producers of `requirements.txt` (openai-agents wants openai 3, the instrumentations
there pin openai 2), so each family gets a virtualenv of its own, built from
`tests/otlp_agents/families/<name>.txt` (pinned requirements).

The virtualenvs live outside the work tree, in `~/.cache/toolscope-test/` (or
`$TOOLSCOPE_TEST_VENVS`), named after the family and the hash of its pinned file and of the
Python version: a fresh clone on the same machine (CI's, every run) finds them built instead of
installing the eight families again (about 2 GB, crewai alone a GB; minutes of `pip install`
inside the suite's time). A changed pin is a new name, so a clone with other pins never uses
a stale one.

    from tests.otlp_agents.venvs import family_python
    python = family_python("langchain")  # ~/.cache/toolscope-test/otlp-langchain-<hash>/bin/python

Where the venv cannot be built (no network, pip fails) it skips the test, as
tests/test_otlp_producers.py does, except in CI (`CI=true`), where it fails.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

AGENTS = Path(__file__).parent
FAMILIES = AGENTS / "families"


def _cache() -> Path:
    """`$TOOLSCOPE_TEST_VENVS`, else `~/.cache/toolscope-test/` when it can be written (shared by
    every clone on the machine), else `.venv-otlp-cache/` in the work tree (git ignores it)."""
    configured = os.environ.get("TOOLSCOPE_TEST_VENVS")
    if configured:
        return Path(configured)
    shared = Path.home() / ".cache" / "toolscope-test"
    try:
        shared.mkdir(parents=True, exist_ok=True)
        if os.access(shared, os.W_OK):
            return shared
    except OSError:
        pass
    return AGENTS.parent.parent / ".venv-otlp-cache"


CACHE = _cache()
IN_CI = os.environ.get("CI") == "true"
BUILD_TIMEOUT = 1200


def unavailable(reason: str) -> None:
    """Skip the test, or fail it in CI, where every producer must run."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def _stamp(path: Path) -> str:
    """What the virtualenv is built from: the pinned file's requirements (its comments left
    out, so that editing them rebuilds nothing) and the interpreter's version."""
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    wanted = "\n".join(line for line in lines if line)
    return hashlib.sha256(f"{wanted}\n{sys.version}".encode()).hexdigest()


def family_home(name: str) -> Path:
    return venv_home(FAMILIES / f"{name}.txt", name)


def venv_home(requirements: Path, name: str) -> Path:
    return CACHE / f"otlp-{name}-{_stamp(requirements)[:16]}"


def family_python(name: str) -> Path:
    """The interpreter of the family's virtualenv, built (or rebuilt) from its pinned file."""
    requirements = FAMILIES / f"{name}.txt"
    if not requirements.exists():
        raise FileNotFoundError(requirements)
    return venv_python(requirements, name)


def venv_python(requirements: Path, name: str) -> Path:
    """The interpreter of a virtualenv built from `requirements` (pinned), once per machine."""
    from shared_setup import one_at_a_time

    home = venv_home(requirements, name)
    python = home / "bin" / "python"
    stamp = home / "requirements.sha256"
    wanted = _stamp(requirements)
    with one_at_a_time(home):  # another xdist worker may be building it
        if not (python.exists() and stamp.exists() and stamp.read_text() == wanted):
            shutil.rmtree(home, ignore_errors=True)
            build = subprocess.run(
                [sys.executable, "-m", "venv", str(home)], capture_output=True, text=True
            )
            if build.returncode == 0:
                build = subprocess.run(
                    [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
                    capture_output=True,
                    text=True,
                    timeout=BUILD_TIMEOUT,
                )
            if build.returncode != 0:
                shutil.rmtree(home, ignore_errors=True)
                unavailable(f"cannot install the {name} producers: {build.stderr[-2000:]}")
            stamp.write_text(wanted)
    return python
