"""`GET /api/v1/meta` tells clients the API version and the limits this server enforces."""

from __future__ import annotations

import pytest

from webapp.api.meta import MetaOut


def test_meta_lists_the_api_version_and_the_default_limits(client, project_key, count_queries):
    client.get("/api/v1/meta", headers=project_key.headers)  # records the key's first use
    with count_queries() as queries:
        response = client.get("/api/v1/meta", headers=project_key.headers)

    assert response.status_code == 200
    answer = MetaOut.model_validate(response.get_json())
    assert answer.api_version == 1
    assert answer.limits.model_dump() == {
        "max_tools_per_request": 50,
        "max_ids_per_request": 200,
        "max_messages_per_request": 500,
        "max_body_bytes": 8 * 1024 * 1024,
        "max_result_bytes": 2 * 1024 * 1024,
    }
    # The key lookup only: the limits come from the settings.
    assert queries.count == 1, queries.statements


@pytest.mark.parametrize("app_config", [{"MAX_TOOLS_PER_REQUEST": 20, "MAX_IDS_PER_REQUEST": 7}])
def test_meta_follows_the_server_settings(client, project_key):
    limits = client.get("/api/v1/meta", headers=project_key.headers).get_json()["limits"]

    assert limits["max_tools_per_request"] == 20 and limits["max_ids_per_request"] == 7


def test_meta_needs_a_key(client):
    response = client.get("/api/v1/meta")

    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "unauthorized"
