"""What the runs tests share: an orders conversation the scripted fake model reasons about, a
model connection row to the fake providers (tests/fake_providers.py), and running the queue."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import factories
from fake_providers import API_KEY, FakeProviders

from webapp.db import db
from webapp.ingest.transaction import Write, run_write
from webapp.services.model_connections import (
    ConnectionDraft,
    prepare_connection,
    store_connection,
)
from webapp.services.run_worker import RunWorker

CID = "orders-1"
CALL_ID = "call_lookup_1"
RESULT = "shipped on Monday"
# The first turn an hour before the second: with the project's freshness window (300 s) its
# result is stale at turn 2, so the replay leaves it out.
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
TURN_2 = T0 + timedelta(hours=1)
# Runs fail fast in tests: no SDK retry unless a test asks, a short timeout.
RUN_CONFIG = {"MODEL_MAX_RETRIES": 0, "MODEL_TIMEOUT_SECONDS": 2.0, "RUN_WORKERS": 0}


def fake_server() -> Iterator[FakeProviders]:
    """The body of the `fake` fixture (tests/conftest.py): a scripted provider, stopped after."""
    server = FakeProviders(slow_seconds=4.0).start()
    yield server
    server.stop()


def orders_conversation(app: Any, project_id: int, cid: str = CID) -> None:
    """Turn 1: the user asks about order A1, the agent calls lookup_order and answers. Turn 2,
    an hour later: the user asks again, the agent calls lookup_order again (what it "did
    next" at turn 2)."""
    with app.app_context():
        conv = factories.conversation(project_id, cid, title="Where is my order", at=T0)
        factories.message(conv, f"{cid}-u1", "user", "Where is my order A1?", at=T0)
        first = factories.message(
            conv,
            f"{cid}-a1",
            "assistant",
            f"Your order A1 was {RESULT}.",
            at=T0 + timedelta(seconds=1),
            status="completed",
            model="gpt-4o",
        )
        call = factories.Call("lookup_order", {"order_id": "A1"}, RESULT, external_id=CALL_ID)
        factories.calls(first, 0, [call], at=T0 + timedelta(seconds=1))
        factories.message(conv, f"{cid}-u2", "user", "Is order A1 there yet?", at=TURN_2)
        second = factories.message(
            conv,
            f"{cid}-a2",
            "assistant",
            "It arrives today.",
            at=TURN_2 + timedelta(seconds=1),
            status="completed",
            model="gpt-4o",
        )
        again = factories.Call(
            "lookup_order", {"order_id": "A1"}, "out for delivery", external_id="call_lookup_2"
        )
        factories.calls(second, 0, [again], at=TURN_2 + timedelta(seconds=1))
        factories.commit()


def add_connection(
    app: Any,
    project_id: int,
    name: str,
    kind: str,
    base_url: str,
    *,
    api_key: str | None = API_KEY,
    api_key_env: str | None = None,
    model: str | None = "scripted",
) -> int:
    with app.app_context():
        values = prepare_connection(
            ConnectionDraft(
                name=name,
                kind=kind,
                base_url=base_url,
                default_model=model,
                api_key=api_key,
                api_key_env=api_key_env,
            )
        )
        record = run_write(Write(store_connection, (project_id, values)))
        db.session.remove()
        return record.id


def connect_fake(app: Any, project_id: int, fake: FakeProviders) -> None:
    """Connections `oa` (openai, the fake's /v1) and `an` (anthropic)."""
    add_connection(app, project_id, "oa", "openai", fake.openai_url)
    add_connection(app, project_id, "an", "anthropic", fake.base_url)


def work(app: Any) -> int:
    """Execute every queued run in this thread; how many."""
    return RunWorker(threads=1).run_until_idle(app)


def connection_for(fmt: str) -> str:
    return "an" if fmt == "anthropic" else "oa"
