"""`pip install .` gives a working app: the wheel carries templates, static files, migrations
and the tokenizer data next to the code."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_carries_templates_static_migrations_and_encodings(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("toolscope-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "webapp/templates/base.html",
        "webapp/static/css/toolscope.css",
        "webapp/migrations/env.py",
        "webapp/migrations/alembic.ini",
        "webapp/data/o200k_base.tiktoken.gz",
    }
    assert expected <= names, expected - names
    assert any(n.startswith("webapp/static/vendor/htmx-") for n in names)
    assert any(n.startswith("webapp/migrations/versions/") for n in names)
