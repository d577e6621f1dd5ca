"""The README stays true: every setting is documented, and the two commands are the ones CI runs."""

from __future__ import annotations

from pathlib import Path

from webapp.settings import SETTINGS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_readme_with_its_help():
    for setting in SETTINGS:
        assert f"`{setting.env_var}`" in README, f"{setting.env_var} missing from README"
        assert setting.help in README, f"help text of {setting.env_var} differs from settings.py"


def test_ci_runs_the_readme_test_command():
    assert "make test" in README and "make run" in README
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-1].strip() == "make test"
