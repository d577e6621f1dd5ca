"""toolscope-client stands alone: `pip install ./client` into a fresh virtualenv, with no Flask,
SQLAlchemy or tiktoken, imports and passes the client's own tests (client/tests), on the oldest
Python it supports (3.9) where this machine has one.

About 10-20 s: pip takes requests, pytest and hatchling from its cache after the first run.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "client"
# Set by the environment of a run that must not touch the fresh virtualenv.
LEAKY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


def oldest_python() -> str:
    """Python 3.9 (pyenv's, or on PATH) if this machine has it, else the running interpreter."""
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    candidates = sorted(glob.glob(f"{pyenv_root}/versions/3.9*/bin/python3.9"))
    candidates += [found] if (found := shutil.which("python3.9")) else []
    for candidate in candidates:
        # pyenv's shim is on PATH even when it would refuse to run 3.9.
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv; print(sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 9)":
            return candidate
    return sys.executable


def run(*command: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in LEAKY_VARIABLES}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    result = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, f"{command}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


def test_the_client_installs_alone_and_passes_its_tests(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run(oldest_python(), "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", f"{CLIENT}[test]")

    installed = run(
        python,
        "-c",
        "import importlib.util, sys, toolscope_client;"
        "print(toolscope_client.__file__, sys.version_info[:2]);"
        "print([m for m in ('flask', 'sqlalchemy', 'tiktoken') if importlib.util.find_spec(m)])",
    ).stdout.splitlines()
    assert installed[0].startswith(str(venv)), installed  # the wheel, not the source tree
    assert installed[1] == "[]", installed

    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=CLIENT)
    assert " passed" in tests.stdout and "failed" not in tests.stdout, tests.stdout
