"""The loader hands each message its calls in (round, sequence) order and the messages in time
order, whatever order the rows were stored in: the calls' query reads them in the order of
the indexes (conversation, time, id, round, sequence) rather than sorting by message row id."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, fields
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy.dialects import postgresql

from webapp.auth import get_or_create_project
from webapp.bench.replay import _insert_rows
from webapp.bench.server import BENCH_PROJECT
from webapp.db import UTCDateTime, db
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import _utc_from_driver, load_history, positional_maker
from webapp.replay.history import Message, ServiceCall, ToolCall, ToolDefinition

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


def test_service_calls_come_in_round_order(app) -> None:
    # Stored last round first, and the later message first: the service calls are read in the
    # indexes' order (message time, then round), not sorted by message row id.
    rounds = (2, 0, 1)
    stored = history(
        assistant(
            5, "later", 20, services=tuple(ServiceCall(r, "m", r, 1, 0, at(21)) for r in rounds)
        ),
        user(1, "q", 0),
        assistant(
            2,
            "earlier",
            1,
            (call(3, "c", t=1.5),),
            services=tuple(ServiceCall(r, "m", r, 1, 0, at(2)) for r in rounds),
        ),
        tools=(ToolDefinition("search"),),
    )
    with app.app_context():
        _insert_rows(db, stored, "usage-order")
        db.session.commit()
        project = get_or_create_project(BENCH_PROJECT)
        loaded = load_history(find_conversation(project.id, external_id="usage-order")).history
    assert [m.content for m in loaded.messages] == ["q", "earlier", "later"]
    for m in loaded.messages[1:]:
        assert [(s.round_index, s.input_tokens) for s in m.service_calls] == [
            (0, 0),
            (1, 1),
            (2, 2),
        ]


@pytest.mark.parametrize("cls", [ToolCall, ServiceCall, Message])
def test_the_loaders_positional_maker_makes_the_same_frozen_rows(cls: type) -> None:
    values = {
        ToolCall: (1, "c", "f", {"q": 1}, 0, 2, at(1), "r", at(2), True, False, '{"q":1}'),
        ServiceCall: (3, "m", 1, 2, None, at(3), "Let me check."),
        Message: (4, "m", "assistant", "hi", at(4), "failed", "gpt", (), (), True),
    }[cls]
    made = positional_maker(cls)(*values)
    expected = cls(*values)
    assert type(made) is cls and made == expected and hash(made) == hash(expected)
    assert [getattr(made, f.name) for f in fields(cls)] == list(values)
    with pytest.raises(FrozenInstanceError):
        setattr(made, fields(cls)[0].name, 9)


def test_positional_maker_refuses_a_class_it_would_make_wrongly() -> None:
    @dataclass(frozen=True)  # no slots
    class Plain:
        a: int

    with pytest.raises(TypeError):
        positional_maker(Plain)


@pytest.mark.parametrize(
    "value",
    [
        None,
        datetime(2025, 1, 1, 12, 0, 0, 5),  # naive: UTC
        datetime(2025, 1, 1, 12, tzinfo=UTC),
        datetime(2025, 1, 1, 12, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
        datetime(2025, 3, 30, 1, 30, tzinfo=ZoneInfo("Europe/Paris")),
    ],
)
def test_postgresql_times_are_made_utc_as_utcdatetime_reads_them(value) -> None:
    # The loader reads PostgreSQL's times without the type's result processor and converts
    # them itself: the same datetime, the same tzinfo.
    expected = UTCDateTime().process_result_value(value, postgresql.dialect())
    made = _utc_from_driver(value)
    assert made == expected
    assert made is None or (made.tzinfo is UTC and made.utcoffset() == expected.utcoffset())
