"""`toolscope demo`: realistic conversations covering every case the dashboard and replay handle.

The scenarios (`scenarios.py`) are API request bodies with timestamps relative to now; the
loader (`loader.py`) posts them through the real JSON API into the default project.
"""

from __future__ import annotations

from datetime import timedelta

import click
from flask import current_app
from flask.cli import with_appcontext

from .loader import DemoLoadError, LoadReport, load_demo
from .runs import CONNECTION, add_demo_runs
from .runs import CONVERSATION as DEMO_RUNS_CONVERSATION

# `toolscope demo` (run by every `make run`) reloads a demo older than this relative to now.
REFRESH_AFTER = timedelta(days=1)

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
@click.option(
    "--keep-times",
    is_flag=True,
    help="Never reload a demo loaded more than a day ago (by default it is re-timed to now).",
)
@with_appcontext
def command(project_slug: str | None, reset: bool, large: bool, keep_times: bool) -> None:
    """Load the demo conversations into a project (loading twice changes nothing; a demo
    loaded more than a day ago is reloaded relative to now, so its replays show fresh results)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    slug = project_slug or app.config["DEFAULT_PROJECT"]
    try:
        report = load_demo(
            app,
            slug,
            reset=reset,
            large=large,
            refresh_after=None if keep_times else REFRESH_AFTER,
            progress=click.echo,
        )
    except DemoLoadError as exc:
        raise click.ClickException(str(exc)) from exc
    runs = add_demo_runs(app, slug)
    if runs.connection_added:
        click.echo(f"added the model connection {CONNECTION!r} (the scripted demo model, DEV only)")
    if runs.runs:
        click.echo(
            f"queued a run and a fork of {DEMO_RUNS_CONVERSATION} on it: the server's run worker "
            "sends them when it starts (TOOLSCOPE_DEV=1, as `make run` does)"
        )
    if report.refreshed_from:
        click.echo(
            f"the demo was loaded {report.refreshed_from:%Y-%m-%d %H:%M} UTC; reloaded relative "
            "to now so its results are as old as the demo says (--keep-times to keep them)"
        )
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
