"""The stored tool costs catch up in the background (issue 24): conversations written after
their figures were stored are recomputed by the refresher beside the token pass, so the chart
reads every conversation from stored rows (no "Partial" note) without replaying them itself,
even when more changed than it may replay per request. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import time

from tests.test_storage_attribution import _filters, _replayed, _reset
from tests.test_storage_rollups import BASE, _apply
from webapp.db import db
from webapp.services import attribution_refresh
from webapp.services import attribution_store as store
from webapp.views import charts


def _stale(project_id: int) -> int:
    _rows, total = store.stale_conversations(project_id, None, 1, store.prices_key({}))
    db.session.commit()
    return total


def test_a_step_recomputes_each_projects_stale_conversations_in_batches(
    app, client, project_key, other_project_key, monkeypatch
):
    _reset(app)
    for conv in range(3):
        _apply(app, client, project_key, ("native", conv, 0, 4, True, False))
    _apply(app, client, other_project_key, ("native", 0, 0, 3, True, False))
    monkeypatch.setattr(store, "INLINE_MAX", 0)  # the chart replays nothing itself
    with app.app_context():
        assert _stale(project_key.project_id) == 3 and _stale(other_project_key.project_id) == 1
        assert attribution_refresh.refresh_step(batch=2) is True  # one of the first is left
        assert _stale(project_key.project_id) == 1 and _stale(other_project_key.project_id) == 0
        assert attribution_refresh.refresh_step(batch=2) is False
        assert _stale(project_key.project_id) == 0
        f = _filters(BASE)
        want = _replayed(project_key.project_id, f)
        db.session.commit()
        got, notes = charts.project_attribution(project_key.project_id, {}, f)
        assert got == want and want
        assert not [n for n in notes if n.startswith(("Partial", "Approximate"))]
    # A later write makes its conversation stale again; the next step brings it back.
    _apply(app, client, project_key, ("native", 1, 1, 2, True, True))
    with app.app_context():
        assert _stale(project_key.project_id) == 1
        assert attribution_refresh.refresh_step() is False
        assert _stale(project_key.project_id) == 0


def test_the_refresher_thread_keeps_the_chart_whole(app, client, project_key, monkeypatch):
    _reset(app)
    for conv in range(3):
        _apply(app, client, project_key, ("native", conv, 0, 4, True, False))
    monkeypatch.setattr(store, "INLINE_MAX", 0)
    app.config["ATTRIBUTION_REFRESH_SECONDS"] = 0.05
    refresher = attribution_refresh.AttributionRefresher.for_app(app)
    assert refresher is not None
    refresher.start(app)
    try:
        deadline = time.monotonic() + 60  # generous: a loaded machine
        with app.app_context():
            while _stale(project_key.project_id) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _stale(project_key.project_id) == 0
    finally:
        refresher.stop()
    app.config["ATTRIBUTION_REFRESH_SECONDS"] = 0
    assert attribution_refresh.AttributionRefresher.for_app(app) is None
