"""The reads bench's bulk loader (webapp.bench.reads, issue 24) stores what the write paths
store: the calls of a turn posted through the native API give the loader's rows column for
column; the token counts are the token pass's heuristic ones; the search index finds what it
holds; the indexes and triggers it drops for the load are back as they were; the roll-ups it
sums while loading equal ``rebuild``'s recomputation from the rows. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from tests.conftest import add_project_key
from webapp.auth import get_or_create_project
from webapp.bench.reads import RARE_WORD, _derived_tables, _Loader
from webapp.db import db
from webapp.ingest.rollups import rebuild
from webapp.ingest.values import compact_json
from webapp.models import ModelRollup, ToolInvocation, ToolRollup
from webapp.tokens import HEURISTIC_METHOD, heuristic_tokens

CALLS = 4_100  # 164 turns of 25 calls; the rare word in calls 11, 2,011 and 4,011


def _schema() -> list[tuple[str, str]]:
    """The indexes and triggers of the loaded tables, with their definitions."""
    if db.engine.dialect.name == "sqlite":
        sql = "SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'trigger')"
    else:
        sql = "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
    return sorted(tuple(row) for row in db.session.execute(sa.text(sql)))


def _rollups(project_id: int) -> dict[str, list[tuple]]:
    out = {}
    for model in (ToolRollup, ModelRollup):
        table = model.__table__
        columns = [c for c in table.c if c.name != "id"]
        rows = db.session.execute(sa.select(*columns).where(table.c.project_id == project_id))
        out[table.name] = sorted(tuple(row) for row in rows)
    return out


def _matches(word: str, project_id: int) -> int:
    if db.engine.dialect.name == "sqlite":
        sql = (
            "SELECT count(*) FROM tool_invocation WHERE project_id = :p AND id IN "
            "(SELECT rowid FROM tool_call_fts WHERE tool_call_fts MATCH :w)"
        )
    else:
        sql = (
            "SELECT count(*) FROM tool_invocation WHERE project_id = :p AND "
            "search_document @@ to_tsquery('simple', :w)"
        )
    return db.session.execute(sa.text(sql), {"p": project_id, "w": word}).scalar_one()


def _load(app) -> tuple[int, _Loader]:
    project_id = get_or_create_project("bulk").id
    db.session.commit()
    schema = _schema()
    db.session.commit()  # the session's reads start after the load (SQLite's snapshot)
    loader = _Loader(db.engine, project_id, "t")
    loader.load(CALLS, lambda line: None)
    _derived_tables(loader)
    assert _schema() == schema
    return project_id, loader


def test_the_bulk_loaders_rollups_search_index_and_token_counts_are_the_write_paths(app):
    with app.app_context():
        project_id, _ = _load(app)
        calls = db.session.scalars(
            sa.select(ToolInvocation).where(ToolInvocation.project_id == project_id)
        ).all()
        assert len(calls) == CALLS
        for call in calls:
            assert call.arguments_tokens == heuristic_tokens(compact_json(call.arguments))
            assert call.response_tokens == heuristic_tokens(call.response)
            assert call.token_method == HEURISTIC_METHOD
            assert call.response_bytes == len(call.response.encode())
            assert call.stamp is not None
        assert _matches(RARE_WORD, project_id) == 3
        assert _matches("status", project_id) == CALLS

        stored = _rollups(project_id)
        assert stored["tool_rollup"] and stored["model_rollup"]
        rebuild(project_id)
        db.session.commit()
        assert _rollups(project_id) == stored


CALL_COLUMNS = (
    "round_index", "sequence_index", "external_tool_call_id", "function_name", "arguments",
    "created_at", "started_at", "ended_at", "response", "response_created_at", "is_error",
    "response_bytes",
)  # fmt: skip


def _calls(project_id: int, limit: int | None = None) -> list[dict]:
    stmt = sa.select(ToolInvocation).where(ToolInvocation.project_id == project_id)
    calls = db.session.scalars(stmt.order_by(ToolInvocation.id).limit(limit)).all()
    return [{name: getattr(c, name) for name in CALL_COLUMNS} for c in calls]


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()


def test_a_loaded_turn_posted_through_the_native_api_is_stored_as_the_loader_stored_it(app):
    with app.app_context():
        project_id, _ = _load(app)
        loaded = _calls(project_id, 25)  # the first turn: 5 rounds of 5 calls
        db.session.commit()
    tool_calls = [
        {
            "id": c["external_tool_call_id"],
            "name": c["function_name"],
            "arguments": c["arguments"],
            "round_index": c["round_index"],
            "sequence_index": c["sequence_index"],
            "created_at": _iso(c["created_at"]),
            "started_at": _iso(c["started_at"]),
            "ended_at": _iso(c["ended_at"]),
            "response": {
                "content": c["response"],
                "is_error": c["is_error"],
                "created_at": _iso(c["response_created_at"]),
            },
        }
        for c in loaded
    ]
    message = {"id": "a", "role": "assistant", "content": "ok", "tool_calls": tool_calls}
    key = add_project_key(app, "posted")
    response = app.test_client().post(
        "/api/v1/conversations/c/messages", json={"messages": [message]}, headers=key.headers
    )
    assert response.status_code in (200, 201), response.get_json()
    with app.app_context():
        assert _calls(key.project_id) == loaded
