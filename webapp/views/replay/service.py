"""The replay of a stored conversation: find it, load it, build it. Shared by the API and the
dashboard, so both give exactly the same answer for the same options.

Queries, whatever the size of the conversation: one for the conversation (with its channel and
the project's freshness window), four for its history (``webapp.history_loader``). The replay,
its validation and the naive-replay check are pure and run on the loaded history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from typing import Any

from sqlalchemy import select

from ...db import db
from ...models import Channel, Conversation, Project
from ...queries.histories import ConversationRef, LoadedHistory, load_history_with_tokens
from ...replay import History, ReplayOptions, ReplayResult, replay, turn_starts, validate
from ...replay.diagnostics import Problem
from ...replay.export import (
    ConversationInfo,
    ReplayQuery,
    export_document,
    replay_options,
)
from ...replay.gc_pause import gc_paused
from ...replay.naive import naive_replay_problems
from ...replay_tokens import COUNTER_NAME, stored_counter


def without_cyclic_gc(view: Callable[..., Any]) -> Callable[..., Any]:
    """A view run under :func:`gc_paused`."""

    @wraps(view)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with gc_paused():
            return view(*args, **kwargs)

    return wrapped


@dataclass(frozen=True, slots=True)
class StoredConversation:
    row_id: int
    info: ConversationInfo
    ref: ConversationRef
    # The configured freshness window: the channel's override, else the project's (None: off).
    freshness_seconds: float | None


def find_conversation(
    project_id: int, *, external_id: str | None = None, row_id: int | None = None
) -> StoredConversation | None:
    """The project's conversation with that external id or row id, in one query."""
    query = (
        select(
            Conversation.id,
            Conversation.external_id,
            Conversation.title,
            Conversation.system_prompt,
            Channel.name.label("channel"),
            Channel.freshness_seconds.label("channel_window"),
            Project.freshness_seconds.label("project_window"),
        )
        .join(Project, Project.id == Conversation.project_id)
        .outerjoin(Channel, Channel.id == Conversation.channel_id)
        .where(Conversation.project_id == project_id)
    )
    if external_id is not None:
        query = query.where(Conversation.external_id == external_id)
    elif row_id is not None:
        query = query.where(Conversation.id == row_id)
    else:
        raise TypeError("find_conversation needs external_id or row_id")
    row = db.session.execute(query).first()
    if row is None:
        return None
    window = row.channel_window if row.channel_window is not None else row.project_window
    return StoredConversation(
        row_id=row.id,
        info=ConversationInfo(row.external_id, row.title or "", row.channel),
        ref=ConversationRef(row.id, row.external_id, row.channel, row.system_prompt),
        freshness_seconds=None if window is None else float(window),
    )


def load(conversation: StoredConversation) -> LoadedHistory:
    return load_history_with_tokens(conversation.ref)


@dataclass
class BuiltReplay:
    """One replay of a loaded conversation, with the checks the export document carries."""

    conversation: StoredConversation
    history: History
    query: ReplayQuery
    options: ReplayOptions
    result: ReplayResult
    _checks: dict[str, list[Problem]] = field(default_factory=dict, repr=False)

    @property
    def validation(self) -> list[Problem]:
        """What a provider would reject in our payload: expected to be empty."""
        if "validation" not in self._checks:
            self._checks["validation"] = validate(self.result.payload, self.options.format)
        return self._checks["validation"]

    @property
    def naive_problems(self) -> list[Problem]:
        """What a provider would reject if the raw rows were replayed as they are."""
        if "naive" not in self._checks:
            self._checks["naive"] = naive_replay_problems(self.history, self.options)
        return self._checks["naive"]

    def document(self) -> dict[str, Any]:
        return export_document(
            self.conversation.info,
            self.query,
            self.options,
            self.result,
            validation=self.validation,
            naive_problems=self.naive_problems,
            token_counter=COUNTER_NAME,
        )


def turn_times(history: History) -> list[datetime]:
    """When each turn started (its user message), in order: ``as_of=turn:<n>`` picks one."""
    return [t.created_at for t in turn_starts(history)]


def build(
    conversation: StoredConversation,
    loaded: LoadedHistory,
    query: ReplayQuery,
    now: datetime,
) -> BuiltReplay:
    """Replay ``loaded`` under ``query``; raises ``OptionError`` for an unusable ``as_of``."""
    options = replay_options(
        query,
        now=now,
        turn_times=turn_times(loaded.history),
        configured_freshness=conversation.freshness_seconds,
        # The loader's dict is the memo: a comparison's two replays share what was counted.
        count_tokens=stored_counter(loaded.stored_tokens, loaded.model),
    )
    result = replay(loaded.history, options)
    return BuiltReplay(conversation, loaded.history, query, options, result)
