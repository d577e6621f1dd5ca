"""The stored tool-cost attribution kept up to date in the background.

Writes only make a conversation's stored attribution stale (its revision moves on,
:mod:`webapp.services.attribution_store`); the chart replays at most a few stale conversations
per request and says when more are pending. Under steady ingestion that would leave the chart
"partial" for as long as agents write, so a thread beside the token pass (in the token pass
process under gunicorn, in ``toolscope serve`` itself) recomputes them: every
``ATTRIBUTION_REFRESH_SECONDS``, at most ``batch`` conversations per project, the most recently
active first, and again after ``CATCH_UP_SECONDS`` while a project has more (not at once: during
a burst of writes every step finds new stale conversations, and each store takes the write
lock the writers need). Its replays run at the lowest CPU priority, like the token pass's
tokenizing, so requests come first; its writes do not (`webapp.background`: a thread starved
while it holds SQLite's write lock makes every writer wait).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from ..background import LowPriorityLane, direct
from ..db import db
from ..models import Project
from ..pricing import parse_overrides
from ..queries.projects import price_overrides
from . import attribution_store as store

log = logging.getLogger(__name__)

BATCH = 50  # conversations per project per step: a few hundred ms of replays at most
CATCH_UP_SECONDS = 0.5


def refresh_step(batch: int = BATCH, compute_in: Callable[..., Any] = direct) -> bool:
    """Recompute up to ``batch`` stale conversations of every project; True when a project had
    more than that (the caller goes on at once). A batch that comes back stale again (counts
    still pending) is left to the next step."""
    more = False
    project_ids = db.session.scalars(select(Project.id).order_by(Project.id)).all()
    for project_id in project_ids:
        overrides = parse_overrides(price_overrides(project_id))
        stale, total = store.stale_conversations(
            project_id, None, batch, store.prices_key(overrides)
        )
        if stale:
            store.refresh(project_id, dict(stale), overrides, compute_in)
            more = more or total > len(stale)
    db.session.commit()
    return more


@dataclass
class AttributionRefresher:
    """``refresh_step`` on a daemon thread: ``start(app)``, ``stop()``."""

    interval: float
    batch: int = BATCH
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def for_app(cls, app: Any) -> AttributionRefresher | None:
        """The app's refresher, or None when ``ATTRIBUTION_REFRESH_SECONDS`` is 0."""
        interval = float(app.config.get("ATTRIBUTION_REFRESH_SECONDS") or 0)
        return cls(interval) if interval > 0 else None

    def start(self, app: Any) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(app,), name="toolscope-attribution", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, app: Any) -> None:
        lane = LowPriorityLane("toolscope-attribution-replays")

        def compute_in(fn: Callable[..., Any], *args: Any) -> Any:
            return lane.run(_in_app_context, app, fn, *args)

        try:
            self._loop(app, compute_in)
        finally:
            lane.close()

    def _loop(self, app: Any, compute_in: Callable[..., Any]) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            wait = self.interval
            try:
                with app.app_context():
                    try:
                        if refresh_step(self.batch, compute_in):
                            wait = min(CATCH_UP_SECONDS, self.interval)
                    finally:
                        db.session.remove()
            except Exception:  # the database may be busy or gone: try again next time
                log.warning("attribution refresh failed; retrying", exc_info=True)


def _in_app_context(app: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with a database session of its own (the lane's thread has none)."""
    with app.app_context():
        try:
            return fn(*args)
        finally:
            db.session.remove()
