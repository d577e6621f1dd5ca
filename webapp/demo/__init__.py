"""`toolscope demo`: realistic conversations covering every case the dashboard and replay handle.

The scenarios (`scenarios.py`) are API request bodies with timestamps relative to now; the
loader (`loader.py`) posts them through the real JSON API into the default project.
"""

from __future__ import annotations

import click
from flask import current_app
from flask.cli import with_appcontext

from .loader import DemoLoadError, LoadReport, load_demo

__all__ = ["DemoLoadError", "LoadReport", "command", "load_demo"]


@click.command("demo")
@click.option(
    "--project",
    "project_slug",
    default=None,
    help="Project slug (default: the DEFAULT_PROJECT setting).",
)
@click.option(
    "--reset",
    is_flag=True,
    help="Delete the demo conversations first and reload them with fresh timestamps.",
)
@click.option(
    "--large", is_flag=True, help="Also load one conversation with 10,000 calls over 1,000 turns."
)
@with_appcontext
def command(project_slug: str | None, reset: bool, large: bool) -> None:
    """Load the demo conversations into a project (loading twice changes nothing)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    slug = project_slug or app.config["DEFAULT_PROJECT"]
    try:
        report = load_demo(app, slug, reset=reset, large=large, progress=click.echo)
    except DemoLoadError as exc:
        raise click.ClickException(str(exc)) from exc
    if report.deleted:
        click.echo(f"deleted {report.deleted} demo conversations")
    click.echo(
        f"demo data in project {slug!r}: {len(report.loaded)} conversations loaded, "
        f"{len(report.unchanged)} already there (unchanged)"
    )
    if report.unchanged:
        click.echo(
            f"timestamps are relative to the first load ({report.loaded_at:%Y-%m-%d %H:%M} UTC); "
            "--reset reloads everything relative to now"
        )
    if report.new_key:
        click.echo("The project had no API key; created one (shown only this once):")
        click.echo(f"  {report.new_key}")
