"""The docs stay true: every setting is in the README, the two commands are the ones CI runs, and
the code cites only documents the repository has."""

from __future__ import annotations

import re
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


def test_the_readme_says_how_to_serve_on_another_port_as_the_makefile_takes_it():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PORT \?= 8000$", makefile, re.MULTILINE)
    assert "toolscope serve --host $(HOST) --port $(PORT)" in makefile
    assert "make run PORT=8001" in README


def test_the_readme_names_what_make_test_needs():
    requirements = README[README.index("Requirements:") :].split("\n\n")[0]
    for needed in ("PostgreSQL", "chromium", "nginx", "`node`", "`npm`", "PyPI", "npm registry"):
        assert needed in requirements, needed


# --- Citations: the code cites only what the repository contains -------------------------------

MAPPING = ROOT / "docs" / "otlp-mapping.md"
# Where code lives; tests/otlp_agents/node/node_modules is vendored, not ours.
CODE_DIRS = ("webapp", "client", "templates", "static", "tests")
CODE_SUFFIXES = {".py", ".html", ".js", ".css", ".md", ".toml", ".txt", ".cfg", ".sh"}
# Documents that are not in the repository: a specification's numbered sections, the design
# notes and the seed documents the project started from.
FOREIGN_CITATIONS = re.compile(r"§|seed[ _]?00\d|DESIGN\.md", re.IGNORECASE)
# The one way to point at a rule of the OTLP mapping: the file, then a section title in quotes.
MAPPING_POINTER = re.compile(r"otlp-mapping\.md(, '([^'\n]+)')?")


def _code_files(tops: tuple[str, ...] = CODE_DIRS) -> list[Path]:
    files = []
    for top in tops:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if (
                path.suffix in CODE_SUFFIXES
                and path.is_file()
                and "node_modules" not in parts
                and "__pycache__" not in parts
                and path != Path(__file__).resolve()
            ):
                files.append(path)
    return files


def _lines(pattern: re.Pattern[str], files: list[Path]) -> list[tuple[str, int, re.Match[str]]]:
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in pattern.finditer(line):
                found.append((str(path.relative_to(ROOT)), number, match))
    return found


def test_code_and_docs_cite_no_document_the_repository_lacks():
    files = [*_code_files(), *_code_files(("docs",)), ROOT / "README.md"]
    found = [
        f"{path}:{number}: {m.group()!r}" for path, number, m in _lines(FOREIGN_CITATIONS, files)
    ]
    assert not found, "cite docs/ by file and section title, or say the rule:\n" + "\n".join(found)


def test_every_pointer_into_the_otlp_mapping_names_one_of_its_sections():
    titles = {
        line[3:].strip() for line in MAPPING.read_text().splitlines() if line.startswith("## ")
    }
    pointers = _lines(MAPPING_POINTER, _code_files())
    assert len(pointers) >= 10  # the OTLP core points at the mapping's sections
    bad = [
        f"{path}:{number}: {m.group()!r}"
        for path, number, m in pointers
        if m.group(2) not in titles
    ]
    assert not bad, (
        "write docs/otlp-mapping.md, '<a ## title of that file>' on one line:\n" + "\n".join(bad)
    )
