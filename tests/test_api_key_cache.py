"""Each worker caches keys, projects and redaction rules; a change made anywhere (another worker,
another server, the CLI, SQL by hand) is seen by the very next request.

The changes here are made on a connection of their own, not through the app, as another
process would make them: the app learns of them only through the api_state version.
"""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from api_support import assert_error, raw_rows, row_counts, tool_item

URL = "/api/v1/messages/tools"
EMAIL = "jane.doe@example.com"


def post(client, key, message_id: str, **tool: object):
    body = {"messageId": message_id, "tools": [tool_item(arguments={"to": EMAIL}, **tool)]}
    return client.post(URL, json=body, headers=key.headers)


@pytest.fixture
def outside(app):
    """Run SQL as another process would: its own engine, committed at once."""
    engine = sa.create_engine(app.config["DATABASE_URL"])

    def run(sql: str) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(sql)

    yield run
    engine.dispose()


def version(app) -> int:
    rows = raw_rows(app, "SELECT version FROM api_state")
    return rows[0][0] if rows else 0


def stored_arguments(app) -> list[dict]:
    rows = raw_rows(app, "SELECT arguments FROM tool_invocation ORDER BY id")
    return [json.loads(a) if isinstance(a, str) else a for (a,) in rows]  # PostgreSQL: JSONB


def test_a_key_revoked_elsewhere_is_refused_at_the_next_request(app, client, project_key, outside):
    assert post(client, project_key, "m1").status_code == 201  # the key is now cached
    assert post(client, project_key, "m2").status_code == 201  # and used from the cache
    outside("UPDATE api_key SET revoked_at = CURRENT_TIMESTAMP")
    assert_error(post(client, project_key, "m3"), 401, "unauthorized")
    response = client.get(f"{URL}?messageIds=m1", headers=project_key.headers)
    assert_error(response, 401, "unauthorized")
    assert row_counts(app)["message"] == 2


def test_a_key_deleted_elsewhere_is_refused_at_the_next_request(app, client, project_key, outside):
    assert post(client, project_key, "m1").status_code == 201
    outside("DELETE FROM api_key")
    assert_error(post(client, project_key, "m2"), 401, "unauthorized")


def test_a_revoked_cached_key_gets_401_not_the_bodys_error(client, project_key, outside):
    """401 wins over 400/422 also for a key this worker had cached."""
    assert post(client, project_key, "m1").status_code == 201
    outside("UPDATE api_key SET revoked_at = CURRENT_TIMESTAMP")
    response = client.post(URL, json={"messageId": "m2"}, headers=project_key.headers)
    assert_error(response, 401, "unauthorized")
    bad_json = client.post(
        URL, data="{oops", headers={**project_key.headers, "Content-Type": "application/json"}
    )
    assert_error(bad_json, 401, "unauthorized")


def test_a_revoked_cached_key_gets_401_not_the_batchs_error(app, client, project_key, outside):
    """Also for an error the prepare step finds (too many tools), before any write."""
    assert post(client, project_key, "m1").status_code == 201
    outside("UPDATE api_key SET revoked_at = CURRENT_TIMESTAMP")
    tools = [tool_item(0, i) for i in range(app.config["MAX_TOOLS_PER_REQUEST"] + 1)]
    response = client.post(
        URL, json={"messageId": "m2", "tools": tools}, headers=project_key.headers
    )
    assert_error(response, 401, "unauthorized")


def test_a_rule_added_elsewhere_applies_to_the_next_request(app, client, project_key, outside):
    assert post(client, project_key, "m1").status_code == 201
    outside(
        "INSERT INTO redaction_rule (project_id, name, kind, value, enabled, created_at) "
        "VALUES (1, 'pii', 'mask', '[\"email\"]', TRUE, CURRENT_TIMESTAMP)"
    )
    assert post(client, project_key, "m2").status_code == 201
    outside("UPDATE redaction_rule SET enabled = FALSE")
    assert post(client, project_key, "m3").status_code == 201
    first, masked, plain = stored_arguments(app)
    assert first["to"] == EMAIL and EMAIL not in json.dumps(masked) and plain["to"] == EMAIL


def test_what_bumps_the_version_and_what_does_not(app, client, project_key, outside):
    start = version(app)
    assert post(client, project_key, "m1").status_code == 201  # records last_used_at
    assert raw_rows(app, "SELECT last_used_at FROM api_key")[0][0] is not None
    outside("UPDATE api_key SET last_used_at = CURRENT_TIMESTAMP, name = 'x'")
    outside("UPDATE project SET name = 'renamed', freshness_seconds = 60")
    assert version(app) == start
    outside("UPDATE project SET price_overrides = '{}'")
    assert version(app) == start + 1
    outside("UPDATE api_key SET revoked_at = NULL")
    assert version(app) == start + 2


def test_a_write_with_the_cache_current_checks_it_in_one_statement(
    client, project_key, count_queries
):
    """The key and the rules come from the cache; the write transaction reads api_state once
    (no separate read transaction before it)."""
    assert post(client, project_key, "warm").status_code == 201
    with count_queries() as q:
        assert post(client, project_key, "m1").status_code == 201
    assert sum("api_state" in s for s in q.statements) == 1, q.statements
    assert not any("api_key" in s or "redaction_rule" in s for s in q.statements), q.statements
