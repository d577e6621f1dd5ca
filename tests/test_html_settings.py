"""Settings: keys shown once, revoked; redaction rules validated; channel and project windows;
new projects. Every form carries a CSRF token and bad input writes nothing."""

from __future__ import annotations

import pytest
from dashboard_support import csrf_token, dashboard_fixture, page  # noqa: F401
from html_dom import parse
from sqlalchemy import func, select

from webapp.auth import hash_key
from webapp.db import db
from webapp.models import ApiKey, Channel, Project, RedactionRule


def rows(app, model, *where):
    with app.app_context():
        return db.session.scalars(select(model).where(*where)).all()


def post(client, url, **form):
    return client.post(url, data={"csrf_token": csrf_token(client), **form})


def test_every_form_carries_a_csrf_token(app, dashboard, project_key):
    doc = page(dashboard.get("/settings"))
    assert not doc.select(".form-error")  # no error shown on a fresh page
    assert "object at 0x" not in doc.text
    forms = doc.select("form[method=post]")
    assert len(forms) >= 5
    for form in forms:
        assert form.select("input[name=csrf_token]"), form.get("action")
    assert dashboard.post("/settings/keys", data={"name": "x"}).status_code == 400
    assert len(rows(app, ApiKey)) == 1  # only the fixture's key


def test_a_new_key_is_shown_once_and_stored_as_a_hash(app, dashboard, project_key):
    response = post(dashboard, "/settings/keys", name="ci <bot>")
    assert response.status_code == 201
    doc = parse(response.data)
    plain = doc.one("#new-key").text
    assert plain.startswith("ts_")
    stored = rows(app, ApiKey, ApiKey.name == "ci <bot>")
    assert len(stored) == 1 and stored[0].key_hash == hash_key(plain)
    again = page(dashboard.get("/settings"))
    assert plain not in again.text and not again.select("#new-key")
    # The key works against the API.
    api = dashboard.get("/api/v1/channels", headers={"Authorization": f"Bearer {plain}"})
    assert api.status_code == 200


def test_revoking_a_key(app, dashboard, project_key):
    key_id = rows(app, ApiKey)[0].id
    response = post(dashboard, f"/settings/keys/{key_id}/revoke")
    assert response.status_code == 302
    assert rows(app, ApiKey)[0].revoked_at is not None
    api = dashboard.get("/api/v1/channels", headers=project_key.headers)
    assert api.status_code == 401


def test_other_projects_keys_and_rules_cannot_be_touched(
    app, dashboard, project_key, other_project_key
):
    theirs = rows(app, ApiKey, ApiKey.project_id == other_project_key.project_id)[0]
    assert post(dashboard, f"/settings/keys/{theirs.id}/revoke").status_code == 404
    assert rows(app, ApiKey, ApiKey.id == theirs.id)[0].revoked_at is None
    with app.app_context():
        rule = RedactionRule(
            project_id=other_project_key.project_id, name="r", kind="skip", value=[]
        )
        db.session.add(rule)
        db.session.commit()
        rule_id = rule.id
    assert post(dashboard, f"/settings/rules/{rule_id}/delete").status_code == 404
    assert rows(app, RedactionRule, RedactionRule.id == rule_id)


def test_adding_and_deleting_redaction_rules(app, dashboard, project_key):
    response = post(
        dashboard, "/settings/rules", name="mask secrets", function_name="crm_*", kind="mask",
        value="email\napi_key\n",
    )  # fmt: skip
    assert response.status_code == 302
    (rule,) = rows(app, RedactionRule)
    assert (rule.name, rule.function_name, rule.kind, rule.value) == (
        "mask secrets", "crm_*", "mask", ["email", "api_key"],
    )  # fmt: skip
    doc = page(dashboard.get("/settings"))
    assert "mask secrets" in doc.one("#rules table").text
    assert post(dashboard, f"/settings/rules/{rule.id}/delete").status_code == 302
    assert rows(app, RedactionRule) == []


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"name": "", "kind": "skip"}, "name"),
        ({"name": "r", "kind": "explode"}, "kind"),
        ({"name": "r", "kind": "mask", "value": "no-such-detector"}, "value"),
        ({"name": "r", "kind": "redact_paths", "value": ""}, "value"),
    ],
)
def test_invalid_rules_are_422_and_write_nothing(app, dashboard, project_key, form, field):
    response = post(dashboard, "/settings/rules", **form)
    assert response.status_code == 422
    assert parse(response.data).select("#rules .form-error")
    assert rows(app, RedactionRule) == []


def test_channel_and_project_windows(app, dashboard, project_key):
    assert (
        post(
            dashboard, "/settings/channels", name="support-bot", freshness_seconds="60"
        ).status_code
        == 302
    )
    (channel,) = rows(app, Channel)
    assert (channel.name, channel.freshness_seconds) == ("support-bot", 60)
    post(dashboard, "/settings/channels", name="support-bot", freshness_seconds="")
    assert rows(app, Channel)[0].freshness_seconds is None  # back to the project's window
    assert (
        post(dashboard, "/settings/channels", name="x", freshness_seconds="-5").status_code == 422
    )
    assert (
        post(dashboard, "/settings/channels", name="x", freshness_seconds="soon").status_code == 422
    )
    assert len(rows(app, Channel)) == 1
    assert post(dashboard, "/settings/project", freshness_seconds="900").status_code == 302
    assert rows(app, Project, Project.id == project_key.project_id)[0].freshness_seconds == 900
    assert post(dashboard, "/settings/project", freshness_seconds="").status_code == 302
    assert rows(app, Project, Project.id == project_key.project_id)[0].freshness_seconds is None


def test_creating_a_project_switches_to_it(app, dashboard, project_key):
    assert post(dashboard, "/settings/projects", slug="Bad Slug!").status_code == 422
    assert post(dashboard, "/settings/projects", slug="staging", name="Staging").status_code == 302
    doc = page(dashboard.get("/settings"))
    assert "Staging" in doc.one("h1").text
    assert doc.one("#project-select option[selected]").text == "Staging"
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(Project)) == 2


def test_settings_json_twin(app, dashboard, project_key):
    body = dashboard.get("/settings.json").get_json()
    assert body["project"]["slug"] == "default"
    assert body["keys"][0]["prefix"].startswith("ts_") and "key_hash" not in body["keys"][0]
    assert body["redaction_rules"] == [] and body["channels"] == []


def test_the_rules_section_says_which_places_each_kind_of_rule_reaches(dashboard, project_key):
    (section,) = page(dashboard.get("/settings")).select("#rules")
    said = " ".join(section.text.split())
    for place in (
        "tool_arguments",
        "message text",
        "span names",
        "http.request.header.authorization",
        "user:password@",
        "exception events",
        "resource attributes",
        "Not redacted: ids",
    ):
        assert place in said, place
