"""Channels and redaction rules over the API."""

from __future__ import annotations

import pytest
from api_support import assert_error

RULES = "/api/v1/redaction-rules"


def test_put_channel_creates_then_updates_its_window(client, project_key):
    h = project_key.headers
    created = client.put("/api/v1/channels/support-bot", json={"freshness_seconds": 60}, headers=h)
    assert created.status_code == 201
    assert created.get_json()["freshness_seconds"] == 60
    reset = client.put("/api/v1/channels/support-bot", json={"freshness_seconds": None}, headers=h)
    assert reset.status_code == 200 and reset.get_json()["freshness_seconds"] is None
    listed = client.get("/api/v1/channels", headers=h).get_json()["data"]
    assert [(c["name"], c["freshness_seconds"]) for c in listed] == [("support-bot", None)]


@pytest.mark.parametrize(
    "body", [{"freshness_seconds": -1}, {"freshness_seconds": "soon"}, {"window": 5}]
)
def test_bad_channel_bodies_are_422(client, project_key, body):
    response = client.put("/api/v1/channels/bot", json=body, headers=project_key.headers)
    assert_error(response, 422, "invalid")
    assert client.get("/api/v1/channels", headers=project_key.headers).get_json()["data"] == []


def test_rules_are_created_listed_and_deleted(client, project_key):
    h = project_key.headers
    created = client.post(
        RULES,
        headers=h,
        json={
            "name": "no-pii",
            "kind": "mask",
            "value": ["email", "card"],
            "function_name": "crm_*",
        },
    )
    assert created.status_code == 201
    rule = created.get_json()
    assert rule["name"] == "no-pii" and rule["value"] == ["email", "card"]
    assert rule["function_name"] == "crm_*" and rule["enabled"] is True
    skip = client.post(
        RULES, headers=h, json={"name": "drop-debug", "kind": "skip", "function_name": "debug"}
    ).get_json()
    assert skip["value"] == []

    assert [r["name"] for r in client.get(RULES, headers=h).get_json()["data"]] == [
        "no-pii",
        "drop-debug",
    ]
    assert client.delete(f"{RULES}/{rule['id']}", headers=h).status_code == 204
    assert client.delete(f"{RULES}/{rule['id']}", headers=h).status_code == 404
    assert [r["name"] for r in client.get(RULES, headers=h).get_json()["data"]] == ["drop-debug"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "kind": "mask", "value": ["ssn"]}, "value"),
        ({"name": "x", "kind": "mask", "value": []}, "value"),
        ({"name": "x", "kind": "redact_paths", "value": ["a..b"]}, "value"),
        ({"name": "x", "kind": "encrypt", "value": []}, "kind"),
        ({"name": "", "kind": "skip"}, "name"),
    ],
)
def test_unusable_rules_are_refused(client, project_key, body, field):
    response = client.post(RULES, json=body, headers=project_key.headers)
    assert_error(response, 422, "invalid", field=field)
    assert client.get(RULES, headers=project_key.headers).get_json()["data"] == []


def test_rule_names_are_unique_per_project(client, project_key, other_project_key):
    body = {"name": "dup", "kind": "skip"}
    client.post(RULES, json=body, headers=project_key.headers)
    assert_error(client.post(RULES, json=body, headers=project_key.headers), 409, "conflict")
    assert client.post(RULES, json=body, headers=other_project_key.headers).status_code == 201


def test_deleting_a_rule_id_that_is_not_a_number_is_422(client, project_key):
    assert_error(
        client.delete(f"{RULES}/abc", headers=project_key.headers),
        422,
        "invalid",
        field="path.rule_id",
    )
