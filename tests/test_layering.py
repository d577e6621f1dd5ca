"""The layout keeps its shape: every import goes down the layers of docs/architecture.md, the pure
packages import no framework, and the replay core imports nothing of Toolscope but itself.

Imports are read from the source with ``ast`` (inside functions too), so an import added anywhere
in ``webapp/`` is checked without running it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import webapp

PACKAGE = Path(webapp.__file__).resolve().parent

# Areas from the bottom up: an area may import its own modules and those of lower layers, never
# a layer above nor a neighbour in its own layer (api and views know nothing of each other, nor
# do queries and ingest). "app" is webapp/__init__.py, the factory.
LAYERS: list[set[str]] = [
    {"version", "paths", "settings", "errors", "body_deadline", "doorbell", "background"},
    {"replay"},
    {"tokens", "pricing", "redaction"},
    {"analytics"},
    {"db"},
    {"models"},
    {"sql", "auth"},
    {"queries", "ingest", "login_limit"},
    {"services"},
    {"api", "views"},
    {"app"},
    {"token_process"},
    {"demo", "gunicorn_conf", "gunicorn_worker"},
    {"bench"},
    {"cli"},
]
LAYER = {area: n for n, areas in enumerate(LAYERS) for area in areas}

# Pure: no web framework, no database, so they run and are tested on plain data.
PURE = {"replay", "analytics", "tokens", "pricing", "redaction", "settings", "paths", "version"}
FRAMEWORKS = {
    "flask",
    "flask_migrate",
    "flask_openapi3",
    "flask_sqlalchemy",
    "flask_wtf",
    "jinja2",
    "markupsafe",
    "psycopg",
    "sqlalchemy",
    "werkzeug",
}


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        if "migrations" in relative.parts:
            continue  # Alembic's scripts run inside Alembic, not the app
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        yield ".".join(parts), path


def _imports(module: str, path: Path) -> set[str]:
    """Absolute names of everything ``module`` imports (``from x import y`` gives ``x.y``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def area_of(name: str) -> str | None:
    """The area of a webapp module (or of a name inside it); None outside webapp."""
    parts = name.split(".")
    if parts[0] != "webapp":
        return None
    if len(parts) == 1 or parts[1] == "__version__" or parts[1] == "create_app":
        return "app"
    return parts[1]


MODULES = dict(_modules())
IMPORTS = {module: _imports(module, path) for module, path in MODULES.items()}


def test_the_import_reader_sees_imports_at_every_depth() -> None:
    assert "webapp.queries.conversations.find_conversation" in IMPORTS["webapp.api.replay"]
    assert "webapp.create_app" in IMPORTS["webapp.cli"]
    # Inside a function: bench starts servers from the factory.
    assert "webapp.create_app" in IMPORTS["webapp.bench.server"]


def test_every_area_has_a_layer() -> None:
    areas = {area_of(module) for module in MODULES}
    assert areas <= set(LAYER), sorted(areas - set(LAYER))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module: str) -> None:
    own = area_of(module)
    assert own is not None
    for name in sorted(IMPORTS[module]):
        target = area_of(name)
        if target is None or target == own:
            continue
        assert LAYER[target] < LAYER[own], (
            f"{module} imports {name}: {own} (layer {LAYER[own]}) may not use "
            f"{target} (layer {LAYER[target]})"
        )


@pytest.mark.parametrize("module", sorted(m for m in MODULES if area_of(m) in PURE))
def test_pure_packages_import_no_framework(module: str) -> None:
    used = {name.split(".")[0] for name in IMPORTS[module]} & FRAMEWORKS
    assert not used, f"{module} imports {sorted(used)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if area_of(m) == "replay"))
def test_the_replay_core_imports_nothing_of_toolscope_but_itself(module: str) -> None:
    outside = {n for n in IMPORTS[module] if area_of(n) not in (None, "replay")}
    assert not outside, f"{module} imports {sorted(outside)}"


# The surfaces a test file may name (docs/testing.md, "Where a test goes"): test_<surface>_*.py.
TEST_SURFACES = {
    "api", "html", "browser", "reads", "ingest", "otlp", "replay", "analytics", "tokens",
    "pricing", "redaction", "storage", "server", "cli", "client", "demo", "bench", "docs",
    "layering", "packaging",
}  # fmt: skip


def test_every_test_file_names_its_surface() -> None:
    tests = Path(__file__).resolve().parent
    unnamed = sorted(
        path.name
        for path in tests.glob("test_*.py")
        if path.stem.removeprefix("test_").split("_")[0] not in TEST_SURFACES
    )
    assert not unnamed, f"test files naming no surface of docs/testing.md: {unnamed}"


def test_the_surfaces_of_docs_testing_md_are_those_the_rule_checks() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    section = text.split("## Where a test goes", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {name.strip(" `") for row in rows for name in row.split(",")}
    assert documented == TEST_SURFACES
