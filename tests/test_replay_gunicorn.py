"""The replay API through a real gunicorn (the production settings, 1 worker x 4 threads): a
cached answer goes out as several chunks (its pieces with "now" between them) or joined, and
either way the bytes are those of the replay computed at the "now" the answer states, cold and
from the cache, with Content-Length right (issue 10: the answer is in memory once).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
import requests
from flask import jsonify

from webapp import create_app
from webapp.auth import get_or_create_project
from webapp.bench.server import (
    BENCH_PROJECT,
    Server,
    gunicorn_server,
    prepare_database,
    scratch_sqlite,
)
from webapp.db import db
from webapp.ingest.token_pass import MESSAGES, count_pending
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import load_history
from webapp.replay.export import build_replay, parse_query
from webapp.tokens import STORED_COUNTER


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Server, Any]]:
    with scratch_sqlite() as database_url:
        key = prepare_database(database_url)
        app = create_app({"DATABASE_URL": database_url, "SECRET_KEY": "test"})
        with gunicorn_server(database_url, key, workers=1) as running:
            yield running, app
        with app.app_context():
            db.engine.dispose()


def _turn(cid: str, calls: int) -> dict[str, Any]:
    return {
        "user": {"id": f"{cid}-u", "content": "Look it up", "created_at": "2026-01-01T00:00:00Z"},
        "assistant": {
            "id": f"{cid}-a",
            "content": "Found it.",
            "created_at": "2026-01-01T00:00:00.5Z",
            "rounds": [
                {
                    "calls": [
                        {
                            "id": f"call_{n}",
                            "name": "search",
                            "arguments": {"q": f"ünïcode \u2028 {n}"},
                            "created_at": "2026-01-01T00:00:01Z",
                            "response": {
                                "content": f"result {n} " + "x" * 2000,
                                "created_at": f"2026-01-01T00:00:{n + 2:02d}.25Z",
                            },
                        }
                        for n in range(calls)
                    ]
                }
            ],
        },
    }


def _fresh(app: Any, cid: str, params: dict[str, str], now: datetime) -> bytes:
    """The replay computed now from the database, as the route made it before the cache."""
    with app.app_context(), app.test_request_context():
        project = get_or_create_project(BENCH_PROJECT)
        conversation = find_conversation(project.id, external_id=cid)
        loaded = load_history(conversation)
        built = build_replay(
            conversation,
            loaded.history,
            parse_query(params),
            now=now,
            count_tokens=loaded.token_counter(),
            token_counter=STORED_COUNTER,
        )
        body = jsonify(built.document()).get_data()
        db.session.remove()
        return body


# 3 stale results: as_of twice and two marks per age, 8 slots, sent as pieces; 12: joined;
# freshness off: as_of alone.
@pytest.mark.parametrize(("calls", "params"), [(3, {}), (12, {}), (12, {"freshness": "off"})])
def test_answers_through_gunicorn_are_the_replay_at_the_now_they_state(served, calls, params):
    server, app = served
    cid = f"gunicorn-{calls}-{len(params)}"
    headers = {"Authorization": f"Bearer {server.key}"}
    url = f"{server.base_url}/api/v1/conversations/{cid}"
    assert requests.post(f"{url}/turns", json=_turn(cid, calls), headers=headers).status_code == 201
    with app.app_context():
        count_pending()  # the server's pass may not have run yet: counted here, once
        count_pending(kind=MESSAGES)
        db.session.remove()
    for _ in range(3):  # computed and kept, then twice from the cache
        answer = requests.get(f"{url}/replay", params=params, headers=headers, timeout=30)
        assert answer.status_code == 200
        assert int(answer.headers["Content-Length"]) == len(answer.content)
        document = json.loads(answer.content)
        stale = [d for d in document["diagnostics"] if d["kind"] == "stale"]
        assert len(stale) == (0 if params else calls)
        now = datetime.fromisoformat(document["as_of"])
        assert answer.content == _fresh(app, cid, params, now)
