"""The full-text index of tool calls stays in step with every write path (native and
MessageTool writes and updates, imports, the OTLP projector, purge), is used by the query on
PostgreSQL, and is filled for existing rows by its migration."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from api_support import tool_item
from flask_migrate import upgrade
from otlp_support import agent_run, traces_json

from webapp.cli import main
from webapp.db import db, utcnow
from webapp.models import CALL_FTS, PG_SEARCH_INDEX, ToolInvocation
from webapp.queries.call_explorer import CallFilters, list_calls
from webapp.sql import call_text_matches


def found(app, project_id: int, q: str) -> list[str]:
    with app.app_context():
        page = list_calls(project_id, CallFilters(q=q), now=utcnow(), token_cap=None, limit=200)
        return sorted(row.function_name for row in page.rows)


def assert_index_in_step(app) -> None:
    """SQLite: one FTS document per call (the contentless table keeps a size row per doc)."""
    with app.app_context():
        if db.engine.dialect.name != "sqlite":
            return
        with db.engine.connect() as conn:
            docs = conn.exec_driver_sql(f"SELECT count(*) FROM {CALL_FTS}_docsize").scalar()
            calls = conn.exec_driver_sql("SELECT count(*) FROM tool_invocation").scalar()
            conn.exec_driver_sql(f"INSERT INTO {CALL_FTS}({CALL_FTS}) VALUES ('integrity-check')")
    assert docs == calls


def post_tools(client, key, message_id: str, tools: list[dict[str, Any]]):
    response = client.post(
        "/api/v1/messages/tools",
        json={"messageId": message_id, "tools": tools},
        headers=key.headers,
    )
    assert response.status_code == 201, response.data[:500]


def test_message_tool_calls_and_their_later_responses(app, client, project_key):
    post_tools(
        client, project_key, "m1", [tool_item(0, 0, name="lookup", arguments={"city": "Zurich"})]
    )
    assert found(app, project_key.project_id, "zurich") == ["lookup"]
    assert found(app, project_key.project_id, "sunny") == []
    post_tools(
        client,
        project_key,
        "m1",
        [tool_item(0, 0, name="lookup", arguments={"city": "Zurich"}, response="sunny and warm")],
    )
    assert found(app, project_key.project_id, "sunny warm") == ["lookup"]
    assert found(app, project_key.project_id, "zurich sunny") == ["lookup"]
    assert_index_in_step(app)


def test_native_turns_and_imports(app, client, project_key):
    turn = {
        "user": {"id": "u1", "content": "weather?"},
        "assistant": {
            "id": "a1",
            "content": "It rains.",
            "rounds": [
                {
                    "calls": [
                        {
                            "id": "c1",
                            "name": "weather",
                            "arguments": {"q": "Bern"},
                            "response": {"content": "upstream timeout", "is_error": True},
                        }
                    ]
                }
            ],
        },
    }
    response = client.post(
        "/api/v1/conversations/conv-1/turns", json=turn, headers=project_key.headers
    )
    assert response.status_code == 201, response.data[:500]
    assert found(app, project_key.project_id, "upstream timeout") == ["weather"]
    body = {
        "format": "openai-chat",
        "messages": [
            {"role": "user", "content": "Onboard TechCorp"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "tc_01",
                        "type": "function",
                        "function": {"name": "vendor_lookup", "arguments": '{"name":"TechCorp"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "tc_01", "content": "vendor not registered"},
        ],
    }
    response = client.post(
        "/api/v1/conversations/imported/import", json=body, headers=project_key.headers
    )
    assert response.status_code == 201, response.data[:500]
    assert found(app, project_key.project_id, "registered techcorp") == ["vendor_lookup"]
    assert_index_in_step(app)


def test_the_otlp_projector_and_purge(app, client, project_key, runner):
    run = agent_run(7, rounds=2, parallel=2, conversation="otel-conv")
    response = client.post(
        "/v1/traces",
        data=traces_json(run.spans),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {project_key.key}"},
    )
    assert response.status_code == 200, response.data[:500]
    # Results "result 7/0/k": the projector wrote them, the index has them.
    assert found(app, project_key.project_id, "result 7 0 1") == ["tool_1"]
    # Sent again: the projector diff-updates its turn, and the index follows.
    client.post(
        "/v1/traces",
        data=traces_json(run.spans),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {project_key.key}"},
    )
    assert found(app, project_key.project_id, "result 7") == ["tool_0", "tool_1"]
    assert_index_in_step(app)
    result = runner.invoke(main, args=["purge", "--older-than", "0"])
    assert result.exit_code == 0, result.output
    assert found(app, project_key.project_id, "result") == []
    assert_index_in_step(app)


def test_postgresql_answers_from_the_gin_index(app, project_key):
    with app.app_context():
        if db.engine.dialect.name != "postgresql":
            pytest.skip("PostgreSQL's index")
        table = ToolInvocation.__table__
        stmt = sa.select(table.c.id).where(call_text_matches(table, "upstream timeout"))
        sql = str(stmt.compile(db.engine, compile_kwargs={"literal_binds": True}))
        with db.engine.begin() as conn:
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql))
    assert PG_SEARCH_INDEX in plan, plan


def test_the_migration_fills_the_index_for_existing_rows(app):
    with app.app_context():
        db.drop_all()
        with db.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        upgrade(revision="99b645d72984")
        with db.engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO project (id, slug, name, created_at, freshness_seconds, "
                "price_overrides) VALUES (1, 'p', 'p', '2026-01-01 00:00:00', 300, '{}')"
            )
            conn.exec_driver_sql(
                "INSERT INTO message (id, project_id, external_id, role, created_at, imported) "
                "VALUES (1, 1, 'm', 'assistant', '2026-01-01 00:00:00', false)"
            )
            conn.exec_driver_sql(
                "INSERT INTO tool_invocation (id, project_id, message_id, round_index, "
                "sequence_index, external_tool_call_id, function_name, arguments, created_at, "
                "response, is_error) VALUES (1, 1, 1, 0, 0, 'c', 'old_tool', "
                "'{\"city\": \"Lyon\"}', '2026-01-01 00:00:00', 'gateway timeout', true)"
            )
        upgrade()
    assert found(app, 1, "gateway timeout") == ["old_tool"]
    assert found(app, 1, "lyon") == ["old_tool"]
    assert_index_in_step(app)
