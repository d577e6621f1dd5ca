"""Loads the demo scenarios through the real JSON API (a Flask test client with a short-lived
key), so the demo exercises validation, redaction, token counting and ingestion as agents do.

Idempotent the way agents' writes are: the time of the first load is kept in each demo
conversation's metadata, so loading again rebuilds byte-identical payloads and the API stores
nothing new (and completes a load that was interrupted). `reset` deletes the demo's
conversations first and reloads them with timestamps relative to now.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from flask import Flask
from sqlalchemy import delete, func, select, update

from ..auth import create_key, get_or_create_project
from ..db import db, utcnow
from ..ingest import rollups
from ..ingest.token_pass import MESSAGES, count_pending
from ..models import ApiKey, Conversation, Message, ToolInvocation
from .catalog import CHANNELS, REDACTION_RULES
from .large import LARGE_ID, large_conversation
from .payloads import ApiRequest, Scenario
from .scenarios import SCENARIOS, build_all

API = "/api/v1"
LOADED_AT = "demo_loaded_at"  # metadata key of every demo conversation


class DemoLoadError(RuntimeError):
    """The API refused a demo request: a bug in the demo or in the API."""


@dataclass
class LoadReport:
    project: str
    loaded_at: datetime
    loaded: list[str] = field(default_factory=list)  # new conversations
    unchanged: list[str] = field(default_factory=list)  # were there already
    deleted: int = 0
    # A key made for the project because it had none (shown once).
    new_key: str | None = None
    # The demo was reloaded relative to now because it had been loaded at this (older) time.
    refreshed_from: datetime | None = None


def load_demo(
    app: Flask,
    project_slug: str,
    *,
    reset: bool = False,
    large: bool = False,
    now: datetime | None = None,
    refresh_after: timedelta | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> LoadReport:
    """Load the demo. ``refresh_after``: a demo loaded longer ago than this is reloaded
    relative to now (``reset``), the 10,000-call conversation too if it was there (what
    `toolscope demo`, and so every `make run`, does: see docs/demo.md)."""
    ids = [*SCENARIOS, LARGE_ID]
    with app.app_context():
        project = get_or_create_project(project_slug)
        first_load = _first_load_time(project.id, ids)
        current = now or utcnow()
        refreshed = (
            not reset
            and refresh_after is not None
            and first_load is not None
            and current - first_load > refresh_after
        )
        if refreshed:
            reset = True
            large = large or LARGE_ID in _present(project.id, [LARGE_ID])
        deleted = _delete_demo_data(project.id, ids) if reset else 0
        if refresh_after is not None:
            # ``now`` is the clock here: a demo that is not re-timed keeps its first load time.
            loaded_at = current if reset or first_load is None else first_load
        else:
            loaded_at = now or first_load or utcnow()
        present = _present(project.id, ids)
        new_key = create_key(project, "demo")[1] if _has_no_active_key(project.id) else None
        loader_key, loader_plain = create_key(project, "demo loader (deleted after loading)")
        db.session.commit()
        loader_key_id = loader_key.id
        project_id = project.id
    report = (
        LoadReport(
            project_slug, loaded_at, deleted=deleted, new_key=new_key, refreshed_from=first_load
        )
        if refreshed
        else LoadReport(project_slug, loaded_at, deleted=deleted, new_key=new_key)
    )
    scenarios = _stamped(build_all(loaded_at), loaded_at)
    if large:
        progress("building the 10,000-call conversation ...")
        scenarios += _stamped([large_conversation(loaded_at)], loaded_at)
    poster = _Poster(app, loader_plain)
    try:
        _ensure_channels_and_rules(poster)
        for scenario in scenarios:
            if scenario.conversation_id in present:
                report.unchanged.append(scenario.conversation_id)
            else:
                progress(f"{scenario.conversation_id}: {scenario.shows}")
                report.loaded.append(scenario.conversation_id)
            _post_scenario(poster, scenario)
        with app.app_context():
            # What a server's token pass does in the background, now: the demo is complete.
            count_pending()
            count_pending(kind=MESSAGES)
            _settle_last_activity(project_id, ids)
    finally:
        with app.app_context():
            db.session.execute(delete(ApiKey).where(ApiKey.id == loader_key_id))
            db.session.commit()
    return report


def _settle_last_activity(project_id: int, conversation_ids: list[str]) -> None:
    """Each demo conversation's last activity (``updated_at``, the list's order) becomes the time
    of the last thing in it, and stays below the project's own conversations.

    Posting the demo, even data already stored, sets its last activity to the moment of loading,
    so every `toolscope demo` (every `make run`) listed the demo's 15 rows above the user's own.
    The demo's own times (spread over four weeks) are what its rows show instead, the same at
    every load until it is re-timed; and where one would still be later than the earliest last
    activity of a conversation of the project's own (a re-timed demo's "now" is the start of
    `make run`), it is set just below it, 1 ms apart in the demo's own order. So the user's
    conversations come first in the list however often the demo is loaded or re-timed. The
    messages, calls and their times are untouched: only the order key moves, and the replay of
    a conversation does not read it."""
    demo = select(Conversation.id).where(
        Conversation.project_id == project_id, Conversation.external_id.in_(conversation_ids)
    )
    last_message = dict(
        db.session.execute(  # type: ignore[arg-type]
            select(Message.conversation_id, func.max(Message.created_at))
            .where(Message.conversation_id.in_(demo))
            .group_by(Message.conversation_id)
        ).all()
    )
    # The times the demo sends (a message's, a call's end), not those the server stamps when
    # they are posted (calls posted through the MessageTool API carry none).
    last_call = dict(
        db.session.execute(  # type: ignore[arg-type]
            select(Message.conversation_id, func.max(ToolInvocation.ended_at))
            .join(Message, Message.id == ToolInvocation.message_id)
            .where(Message.conversation_id.in_(demo))
            .group_by(Message.conversation_id)
        ).all()
    )
    own_earliest = db.session.scalar(
        select(func.min(Conversation.updated_at)).where(
            Conversation.project_id == project_id,
            Conversation.external_id.not_in(conversation_ids),
        )
    )
    rows = db.session.execute(
        select(Conversation.id, Conversation.created_at).where(Conversation.id.in_(demo))
    ).all()
    last = {
        r.id: max(
            t for t in (r.created_at, last_message.get(r.id), last_call.get(r.id)) if t is not None
        )
        for r in rows
    }
    below = own_earliest
    for conversation_id in sorted(last, key=lambda i: (last[i], i), reverse=True):
        at = last[conversation_id]
        if below is not None:
            at = below = min(at, below - OWN_FIRST_STEP)
        db.session.execute(
            update(Conversation).where(Conversation.id == conversation_id).values(updated_at=at)
        )
    db.session.commit()


# How far apart the demo's rows are put when they are moved below the project's own.
OWN_FIRST_STEP = timedelta(milliseconds=1)


def _stamped(scenarios: list[Scenario], loaded_at: datetime) -> list[Scenario]:
    """Record the load time in every demo conversation's metadata (see the module docstring)."""
    for scenario in scenarios:
        for request in scenario.requests:
            if request.method == "PUT" and request.body is not None:
                request.body.setdefault("metadata", {})[LOADED_AT] = loaded_at.isoformat()
    return scenarios


class _Poster:
    """Requests through the app itself, as an agent would send them over HTTP."""

    def __init__(self, app: Flask, key: str):
        self.client = app.test_client()
        self.headers = {"Authorization": f"Bearer {key}"}

    def send(self, request: ApiRequest) -> object:
        # Flask reuses an active app context (the CLI's) for a request, and with it the database
        # session. Run each request in an empty context so it gets its own, as over HTTP.
        response = contextvars.Context().run(
            self.client.open,
            API + request.path,
            method=request.method,
            json=request.body,
            headers=self.headers,
        )
        if response.status_code >= 300:
            raise DemoLoadError(
                f"{request.method} {request.path} -> {response.status_code}: "
                f"{response.get_data(as_text=True)[:1000]}"
            )
        return response.get_json()


def _post_scenario(poster: _Poster, scenario: Scenario) -> None:
    for request in scenario.requests:
        try:
            poster.send(request)
        except DemoLoadError as exc:
            raise DemoLoadError(f"{scenario.conversation_id}: {exc}") from None


def _ensure_channels_and_rules(poster: _Poster) -> None:
    for name, seconds in CHANNELS.items():
        poster.send(ApiRequest("PUT", f"/channels/{name}", {"freshness_seconds": seconds}))
    existing = poster.send(ApiRequest("GET", "/redaction-rules"))
    names = {rule["name"] for rule in existing["data"]}  # type: ignore[index]
    for rule in REDACTION_RULES:
        if rule["name"] not in names:
            poster.send(ApiRequest("POST", "/redaction-rules", rule))


def _present(project_id: int, conversation_ids: list[str]) -> set[str]:
    rows = db.session.scalars(
        select(Conversation.external_id).where(
            Conversation.project_id == project_id,
            Conversation.external_id.in_(conversation_ids),
        )
    )
    return set(rows)


def _first_load_time(project_id: int, conversation_ids: list[str]) -> datetime | None:
    metadata = db.session.scalars(
        select(Conversation.meta).where(
            Conversation.project_id == project_id,
            Conversation.external_id.in_(conversation_ids),
        )
    )
    for meta in metadata:
        if isinstance(meta, dict) and isinstance(meta.get(LOADED_AT), str):
            return datetime.fromisoformat(meta[LOADED_AT])
    return None


def _has_no_active_key(project_id: int) -> bool:
    active = db.session.scalar(
        select(ApiKey.id).where(ApiKey.project_id == project_id, ApiKey.revoked_at.is_(None))
    )
    return active is None


def _delete_demo_data(project_id: int, conversation_ids: list[str]) -> int:
    """The demo's conversations (messages, calls and usage go with them by cascade), and the
    placeholder messages of MessageTool posts a half-finished load may have left."""
    conversations = select(Conversation.id).where(
        Conversation.project_id == project_id,
        Conversation.external_id.in_(conversation_ids),
    )
    placeholders = select(Message.id).where(
        Message.project_id == project_id,
        Message.conversation_id.is_(None),
        Message.external_id.in_([f"{cid}-1-assistant" for cid in conversation_ids]),
    )
    rollups.remove_conversations(conversations)
    rollups.remove_messages(placeholders)
    removed = db.session.execute(
        delete(Conversation).where(Conversation.id.in_(conversations))
    ).rowcount
    db.session.execute(delete(Message).where(Message.id.in_(placeholders)))
    db.session.commit()
    return removed
