"""The `toolscope` command: serve, demo, keys, connections, conversations, db, purge, bench (and
Flask's own commands)."""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import timedelta

import click
from flask import current_app
from flask.cli import FlaskGroup, with_appcontext
from sqlalchemy import select

from . import create_app
from .auth import create_key, get_or_create_project
from .bench import command as bench_command
from .db import db, utcnow
from .demo import command as demo_command
from .models import ApiKey, Conversation, Project


@click.group(cls=FlaskGroup, create_app=create_app, add_default_commands=False)
def main() -> None:
    """Toolscope: tool-call observability for LLM agents."""


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--debug/--no-debug", default=False, help="Reload on code changes.")
@with_appcontext
def serve_command(host: str, port: int, debug: bool) -> None:
    """Run the development server (use gunicorn in production, see the README)."""
    # Not app.run(): under a Flask CLI command it refuses to start (it expects `flask run`).
    from werkzeug.serving import run_simple

    app = current_app._get_current_object()  # type: ignore[attr-defined]
    if os.environ.get("WERKZEUG_RUN_MAIN") != "true":  # the reloader's child reuses the socket
        _check_port_free(host, port)
    # Writes leave token counts to the pass, as under gunicorn (webapp/gunicorn_conf.py); the
    # reloader's parent process serves nothing, so only the serving process runs it.
    token_pass = None
    interval = app.config.get("TOKEN_PASS_SECONDS") or 0
    if interval > 0 and (not debug or os.environ.get("WERKZEUG_RUN_MAIN") == "true"):
        from .ingest.token_pass import TokenPass

        token_pass = TokenPass.for_app(app)
        token_pass.start(app)
    # The stored tool-cost attribution kept fresh beside the pass (docs/architecture.md).
    refresher = None
    if not debug or os.environ.get("WERKZEUG_RUN_MAIN") == "true":
        from .services.attribution_refresh import AttributionRefresher

        refresher = AttributionRefresher.for_app(app)
        if refresher is not None:
            refresher.start(app)
    # The runs sent to models, as the token pass process sends them under gunicorn.
    run_worker = None
    if app.config.get("RUN_WORKERS", 0) > 0 and (
        not debug or os.environ.get("WERKZEUG_RUN_MAIN") == "true"
    ):
        from .services.run_worker import RunWorker

        run_worker = RunWorker.for_app(app)
        run_worker.start(app)
    click.echo(f"Toolscope on http://{host}:{port}/")
    try:
        run_simple(host, port, app, threaded=True, use_reloader=debug, use_debugger=debug)
    finally:
        if run_worker is not None:
            run_worker.stop()
        if refresher is not None:
            refresher.stop()
        if token_pass is not None:
            token_pass.stop()


def _check_port_free(host: str, port: int) -> None:
    """Fail before the URL is printed when ``host:port`` cannot be bound (another server has
    it): werkzeug would print its own error only after ours announced a URL it does not serve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _name, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            # As werkzeug's server binds: a port left in TIME_WAIT is free, a listening one not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise click.ClickException(
            f"cannot serve on {host}:{port}: {exc.strerror or exc} (is another server using "
            "the port?). Pick another port: toolscope serve --port 8001, or make run PORT=8001."
        ) from None


@click.group("keys")
def keys_group() -> None:
    """Create, list and revoke API keys."""


@keys_group.command("create")
@click.option("--project", "project_slug", default=None, help="Project slug (created if new).")
@click.option("--name", default="", help="A label to tell keys apart.")
@with_appcontext
def keys_create(project_slug: str | None, name: str) -> None:
    """Create a key and print it. It is shown this once only."""
    project = get_or_create_project(project_slug or current_app.config["DEFAULT_PROJECT"])
    _key, plain = create_key(project, name)
    db.session.commit()
    click.echo(plain)


@keys_group.command("list")
@click.option("--project", "project_slug", default=None)
@with_appcontext
def keys_list(project_slug: str | None) -> None:
    """List keys (prefix, project, name, created, last used, revoked)."""
    query = select(ApiKey, Project.slug).join(Project).order_by(ApiKey.id)
    if project_slug:
        query = query.where(Project.slug == project_slug)
    for key, slug in db.session.execute(query):
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
        used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
        click.echo(f"{key.id}\t{key.prefix}…\t{slug}\t{key.name}\tlast used {used}\t{state}")


@keys_group.command("revoke")
@click.argument("key_id", type=int)
@with_appcontext
def keys_revoke(key_id: int) -> None:
    """Revoke a key by its id (see `keys list`)."""
    key = db.session.get(ApiKey, key_id)
    if key is None:
        raise click.ClickException(f"no key with id {key_id}")
    key.revoked_at = key.revoked_at or utcnow()
    db.session.commit()
    click.echo(f"revoked key {key_id} ({key.prefix}…)")


@click.group("connections")
def connections_group() -> None:
    """Model connections: add, list, remove, and re-encrypt their secrets (docs/runs.md)."""


@connections_group.command("add")
@click.option("--project", "project_slug", required=True, help="Project slug (created if new).")
@click.option("--name", required=True, help="The connection's name, unique in the project.")
@click.option("--kind", type=click.Choice(["openai", "anthropic"]), required=True)
@click.option("--base-url", required=True, help="e.g. https://api.openai.com/v1")
@click.option("--api-key-env", default=None, metavar="VAR", help="Read the key from $VAR.")
@click.option("--api-key-stdin", is_flag=True, help="Read the key from standard input.")
@click.option("--model", default=None, help="The default model.")
@click.option("--header", "headers", multiple=True, metavar="'K: V'", help="An extra header.")
@with_appcontext
def connections_add(
    project_slug: str,
    name: str,
    kind: str,
    base_url: str,
    api_key_env: str | None,
    api_key_stdin: bool,
    model: str | None,
    headers: tuple[str, ...],
) -> None:
    """Add a model connection. The key comes from the server's environment variable VAR, read
    whenever the connection is used (--api-key-env), or from standard input, stored encrypted
    (--api-key-stdin); never from the command line, where it would stay in the shell's
    history."""
    from .errors import ApiError
    from .ingest.transaction import Write, run_write
    from .services import model_connections as connections

    if bool(api_key_env) == api_key_stdin:
        raise click.UsageError("give one of --api-key-env VAR and --api-key-stdin")
    api_key = None
    if api_key_stdin:
        api_key = sys.stdin.readline().strip()
        if not api_key:
            raise click.UsageError("--api-key-stdin: standard input is empty")
    try:
        draft = connections.ConnectionDraft(
            name=name,
            kind=kind,
            base_url=base_url,
            default_model=model,
            headers=connections.parse_header_lines(headers),
            api_key=api_key,
            api_key_env=api_key_env,
        )
        values = connections.prepare_connection(draft)
        project_id = get_or_create_project(project_slug).id
        db.session.commit()
        record = run_write(Write(connections.store_connection, (project_id, values)))
    except ApiError as exc:
        raise click.ClickException(exc.message) from None
    source = f"env:{record.secret_env}" if record.secret_env else record.secret_source or "none"
    click.echo(f"added {record.name} ({record.kind}, {record.base_url}, key: {source})")


@connections_group.command("list")
@click.option("--project", "project_slug", default=None)
@with_appcontext
def connections_list(project_slug: str | None) -> None:
    """List connections (project, name, kind, base URL, default model, where the key is)."""
    from .services import model_connections as connections

    query = select(Project.id, Project.slug).order_by(Project.slug)
    if project_slug:
        query = query.where(Project.slug == project_slug)
    for project_id, slug in db.session.execute(query).all():
        for record in connections.list_connections(db.session, project_id):
            source = (
                f"env:{record.secret_env}" if record.secret_env else record.secret_source or "none"
            )
            click.echo(
                f"{slug}\t{record.name}\t{record.kind}\t{record.base_url}\t"
                f"{record.default_model or '-'}\tkey: {source}"
            )


@connections_group.command("remove")
@click.option("--project", "project_slug", required=True)
@click.option("--name", required=True)
@with_appcontext
def connections_remove(project_slug: str, name: str) -> None:
    """Delete a connection."""
    from .ingest.transaction import Write, run_write
    from .services import model_connections as connections

    project_id = db.session.scalar(select(Project.id).where(Project.slug == project_slug))
    db.session.rollback()
    if project_id is None or not run_write(
        Write(connections.delete_connection, (project_id, name))
    ):
        raise click.ClickException(f"no connection {name!r} in project {project_slug!r}")
    click.echo(f"removed {name} from {project_slug}")


@connections_group.command("rotate")
@with_appcontext
def connections_rotate() -> None:
    """Re-encrypt every stored key and header set under the current SECRET_KEY (the old key
    listed in TOOLSCOPE_PREVIOUS_SECRET_KEYS). Afterwards the old key can be dropped."""
    from .ingest.transaction import Write, run_write
    from .services import model_connections as connections

    report = run_write(Write(connections.rotate_all))
    click.echo(f"re-encrypted {report.rotated} connections")
    if report.failed:
        raise click.ClickException(
            f"{len(report.failed)} connections could not be decrypted with SECRET_KEY or "
            f"TOOLSCOPE_PREVIOUS_SECRET_KEYS, left as they are (re-enter their keys): "
            + ", ".join(report.failed)
        )


@click.group("tokens")
def tokens_group() -> None:
    """The token counts of stored tool calls and messages."""


@tokens_group.command("count")
@with_appcontext
def tokens_count() -> None:
    """Count the tokens of every stored call and message content not counted yet (what the
    servers' token pass does in the background). Safe to run at any time, also while servers
    run."""
    from .ingest.token_pass import MESSAGES, count_pending

    calls, messages = count_pending(), count_pending(kind=MESSAGES)
    click.echo(f"{calls} tool calls counted" + (f", {messages} messages" if messages else ""))


@click.group("conversations")
def conversations_group() -> None:
    """Delete a conversation."""


@conversations_group.command("delete")
@click.argument("project_slug", metavar="PROJECT")
@click.argument("cid", metavar="CONVERSATION_ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@with_appcontext
def conversations_delete(project_slug: str, cid: str, yes: bool) -> None:
    """Delete the conversation CONVERSATION_ID (the agent's id) of project PROJECT (its slug),
    with its messages, tool calls, usage and the OTLP data projected into it. A delete that
    loses a race with a writer, or finds the database busy, is tried again (a few times)."""
    found = db.session.execute(
        select(Conversation.id)
        .join(Project, Project.id == Conversation.project_id)
        .where(Project.slug == project_slug, Conversation.external_id == cid)
    ).first()
    if found is None:
        raise click.ClickException(f"no conversation {cid!r} in project {project_slug!r}")
    if not yes:
        click.confirm(f"Delete conversation {cid!r} of project {project_slug!r}?", abort=True)
    db.session.rollback()
    if not _delete_with_retries(project_slug, found.id):
        raise click.ClickException(f"no conversation {cid!r} in project {project_slug!r}")
    click.echo(f"deleted conversation {cid!r} of project {project_slug!r}")


CLI_WRITE_ATTEMPTS = 5


def _delete_with_retries(project_slug: str, conversation_id: int) -> bool:
    """`run_write` of the delete (it runs it once more after a lost race); a busy answer, which
    an API client would retry after Retry-After, is retried here, a second apart at most."""
    from .errors import ApiError
    from .ingest.transaction import Write, run_write

    for attempt in range(1, CLI_WRITE_ATTEMPTS + 1):
        try:
            return run_write(Write(_delete_by_slug, (project_slug, conversation_id)))
        except ApiError as exc:
            if exc.status != 503 or attempt == CLI_WRITE_ATTEMPTS:
                raise click.ClickException(exc.message) from exc
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def _delete_by_slug(project_slug: str, conversation_id: int) -> bool:
    from .ingest import delete_conversation

    project_id = db.session.scalar(select(Project.id).where(Project.slug == project_slug))
    return project_id is not None and delete_conversation(project_id, conversation_id)


@click.command("purge")
@click.option("--older-than", "days", type=click.IntRange(min=0), required=True, help="Days.")
@click.option("--project", "project_slug", default=None)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Most rows deleted per write transaction (fewer when a batch takes long).",
)
@click.option("--quiet", is_flag=True, help="No progress lines.")
@with_appcontext
def purge_command(days: int, project_slug: str | None, batch: int, quiet: bool) -> None:
    """Delete conversations (with their messages and calls) idle for more than DAYS days,
    placeholder messages that never got a conversation, and the raw OTLP spans and log
    records of purged conversations or of none, received more than DAYS days ago. In short
    batches, each its own transaction, so a running server keeps taking writes."""
    from .ingest.purge import purge

    cutoff = utcnow() - timedelta(days=days)
    project_ids = None
    if project_slug:
        project_ids = list(
            db.session.scalars(select(Project.id).where(Project.slug == project_slug))
        )
    db.session.rollback()
    counts = purge(cutoff, project_ids, batch=batch, progress=None if quiet else click.echo)
    click.echo(
        f"purged {counts.conversations} conversations and {counts.orphan_messages} orphan "
        f"messages, {counts.spans} OTLP spans and {counts.logs} OTLP log records"
    )


@click.group("runs")
def runs_group() -> None:
    """Runs: replays sent to model connections (docs/runs.md)."""


@runs_group.command("work")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Default: RUN_WORKERS.")
@click.option("--until-idle", is_flag=True, help="Exit once no run is queued.")
@with_appcontext
def runs_work(threads: int | None, until_idle: bool) -> None:
    """Send queued runs to their models in the foreground, until SIGTERM or Ctrl-C (what the
    server's background process does; safe beside running servers: workers share the queue)."""
    import signal

    from .services.run_worker import RunWorker

    app = current_app._get_current_object()  # type: ignore[attr-defined]
    overrides = {"threads": threads} if threads else {}
    worker = RunWorker.for_app(app, **overrides)
    if until_idle:
        click.echo(f"{worker.run_until_idle(app)} runs executed")
        return
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    worker.start(app)
    click.echo(f"run worker {worker.name}: {worker.threads} threads", err=True)
    try:
        while not stopping:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop()


# Flask-Migrate's `db` comes from the app itself (FlaskGroup looks there after these).
for _command in (
    serve_command,
    keys_group,
    connections_group,
    tokens_group,
    conversations_group,
    purge_command,
    runs_group,
    demo_command,
    bench_command,
):
    main.add_command(_command)
