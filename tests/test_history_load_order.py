"""The loader hands each message its calls in (round, sequence) order and the messages in time
order, whatever order the rows were stored in: the calls' query reads them in the order of
the indexes (conversation, time, id, round, sequence) rather than sorting by message row id."""

from __future__ import annotations

from webapp.auth import get_or_create_project
from webapp.bench.replay import _insert_rows
from webapp.bench.server import BENCH_PROJECT
from webapp.db import db
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import load_history
from webapp.replay.history import ServiceCall, ToolDefinition

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import assistant, at, call, history, user
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import assistant, at, call, history, user


def test_calls_come_in_round_and_sequence_order_and_messages_in_time_order(app) -> None:
    # Stored out of order: the later message gets the lower row id, and each message's calls
    # are inserted last round first, last sequence first.
    stored = history(
        assistant(
            10,
            "later",
            20,
            tuple(
                call(0, f"late-{r}-{s}", round=r, seq=s, t=21 + r) for r in (1, 0) for s in (1, 0)
            ),
            services=(ServiceCall(0, "m", 1, 1, 0, at(22)),),
        ),
        user(1, "q", 0),
        assistant(
            2,
            "earlier",
            1,
            tuple(
                call(0, f"early-{r}-{s}", round=r, seq=s, t=2 + r)
                for r in (2, 1, 0)
                for s in (2, 0, 1)
            ),
        ),
        tools=(ToolDefinition("search"),),
    )
    with app.app_context():
        _insert_rows(db, stored, "load-order")
        db.session.commit()
        project = get_or_create_project(BENCH_PROJECT)
        loaded = load_history(find_conversation(project.id, external_id="load-order")).history
    assert [m.content for m in loaded.messages] == ["q", "earlier", "later"]
    for m in loaded.messages:
        order = [(c.round_index, c.sequence_index) for c in m.tool_calls]
        assert order == sorted(order)
    assert [c.external_id for c in loaded.messages[1].tool_calls][:3] == [
        "early-0-0",
        "early-0-1",
        "early-0-2",
    ]
    assert len(loaded.messages[2].tool_calls) == 4
