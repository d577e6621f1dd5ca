"""Where templates and static files live: next to the code in a wheel, at the top in a checkout."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _first_existing(name: str) -> str:
    inside = _PACKAGE / name
    return str(inside if inside.is_dir() else _PACKAGE.parent / name)


TEMPLATES = _first_existing("templates")
STATIC = _first_existing("static")
MIGRATIONS = str(_PACKAGE / "migrations")
