"""`/api/v1/model-connections` (issue 25, docs/runs.md 'Model connections'): an API key lists
its project's connections without secrets and may not create or delete one; a dashboard login
(with its CSRF token) may. The resolver the runs use: env-var keys, a changed SECRET_KEY, the
previous keys and `rotate_all`, the allowed hosts checked on create and on use."""

from __future__ import annotations

import pytest
from cryptography.fernet import InvalidToken
from dashboard_support import csrf_token, log_in
from hypothesis import given
from hypothesis import strategies as st

from webapp.db import db
from webapp.ingest.transaction import Write, run_write
from webapp.services import model_connections as mc

SECRET = "sk-TESTSECRET-4f9c2a7e1b"
URL = "/api/v1/model-connections"


def _body(**overrides):
    body = {
        "name": "openai-main",
        "kind": "openai",
        "base_url": "https://api.openai.com/v1",
        "default_model": "gpt-4.1-mini",
        "api_key": SECRET,
        "headers": {"OpenAI-Organization": "org-hidden-77"},
    }
    body.update(overrides)
    return body


@pytest.fixture
def dashboard(app, client, project_key):
    log_in(app, client)
    with client.session_transaction() as session:
        session["project_id"] = project_key.project_id
    return client


def _post(dashboard, body, **headers):
    token = csrf_token(dashboard)
    return dashboard.post(URL, json=body, headers={"X-CSRFToken": token, **headers})


def test_a_dashboard_login_creates_and_an_api_key_lists_without_secrets(
    app, dashboard, project_key
):
    created = _post(dashboard, _body())
    assert created.status_code == 201, created.get_json()
    document = created.get_json()
    assert document["has_secret"] is True and document["secret_source"] == "stored"
    assert document["header_names"] == ["OpenAI-Organization"]
    other = app.test_client()
    listed = other.get(URL, headers=project_key.headers)
    assert listed.status_code == 200
    (item,) = listed.get_json()["data"]
    assert item["name"] == "openai-main" and item["kind"] == "openai"
    assert item["default_model"] == "gpt-4.1-mini" and item["secret_env"] is None
    for answer in (created, listed, dashboard.get(URL)):
        text = answer.get_data(as_text=True)
        assert SECRET not in text and "org-hidden-77" not in text
    # The resolver hands both out, to the SDK only.
    with app.app_context():
        resolved = mc.resolve_connection(db.session, project_key.project_id, "openai-main")
    assert resolved.api_key == SECRET
    assert resolved.headers == {"OpenAI-Organization": "org-hidden-77"}
    assert SECRET not in repr(resolved) and "org-hidden-77" not in repr(resolved)


def test_an_api_key_may_not_create_or_delete(app, client, dashboard, project_key):
    assert _post(dashboard, _body()).status_code == 201
    refused = client.post(URL, json=_body(name="mine"), headers=project_key.headers)
    assert refused.status_code == 403
    assert "dashboard login" in refused.get_json()["error"]["message"]
    gone = client.delete(f"{URL}/openai-main", headers=project_key.headers)
    assert gone.status_code == 403
    names = [c["name"] for c in client.get(URL, headers=project_key.headers).get_json()["data"]]
    assert names == ["openai-main"]


def test_strangers_and_cross_site_posts_are_refused(app, dashboard, project_key):
    stranger = app.test_client()
    assert stranger.get(URL).status_code == 401
    assert stranger.post(URL, json=_body()).status_code == 401
    assert stranger.get(URL, headers={"Authorization": "Bearer ts_nope"}).status_code == 401
    # The cookie alone (a form on another site) does not create a connection.
    no_token = dashboard.post(URL, json=_body())
    assert no_token.status_code == 403 and "CSRF" in no_token.get_json()["error"]["message"]
    assert dashboard.get(URL).get_json()["data"] == []


def test_another_projects_key_sees_nothing(app, client, dashboard, other_project_key):
    assert _post(dashboard, _body()).status_code == 201
    assert client.get(URL, headers=other_project_key.headers).get_json()["data"] == []


def test_delete_with_a_dashboard_login(dashboard):
    assert _post(dashboard, _body()).status_code == 201
    token = csrf_token(dashboard)
    assert dashboard.delete(f"{URL}/openai-main", headers={"X-CSRFToken": token}).status_code == 204
    again = dashboard.delete(f"{URL}/openai-main", headers={"X-CSRFToken": token})
    assert again.status_code == 404


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"base_url": "ftp://example.com/v1"}, "base_url"),
        ({"base_url": "file:///etc/passwd"}, "base_url"),
        ({"base_url": "https://user:pw@example.com/v1"}, "base_url"),
        ({"base_url": "https://example.com/v1?api-key=x"}, "base_url"),
        ({"base_url": "not a url"}, "base_url"),
        ({"name": "has space"}, "name"),
        ({"api_key_env": "OPENAI_API_KEY"}, "api_key"),  # both
        ({"api_key": None, "api_key_env": "TOOLSCOPE_SECRET_KEY"}, "api_key_env"),
        ({"api_key": None, "api_key_env": "DATABASE_URL"}, "api_key_env"),
        ({"api_key": None, "api_key_env": "1BAD"}, "api_key_env"),
        ({"headers": {"Bad Header": "x"}}, "headers"),
        ({"headers": {"X-Ok": "line\nbreak"}}, "headers"),
        ({"headers": {"Host": "169.254.169.254"}}, "headers"),
    ],
)
def test_invalid_connections_are_422_naming_the_field_without_the_secret(
    dashboard, overrides, field
):
    answer = _post(dashboard, _body(**overrides))
    assert answer.status_code == 422, answer.get_json()
    assert answer.get_json()["error"]["details"][0]["field"] == field
    assert SECRET not in answer.get_data(as_text=True)


def test_a_taken_name_is_409(dashboard):
    assert _post(dashboard, _body()).status_code == 201
    assert _post(dashboard, _body()).status_code == 409


def test_env_var_keys_are_read_when_used(app, dashboard, project_key, monkeypatch):
    body = _body(name="env", api_key=None, api_key_env="TS_TEST_MODEL_KEY", headers={})
    created = _post(dashboard, body)
    assert created.status_code == 201
    assert created.get_json()["secret_source"] == "env"
    assert created.get_json()["secret_env"] == "TS_TEST_MODEL_KEY"
    monkeypatch.delenv("TS_TEST_MODEL_KEY", raising=False)
    with app.app_context():
        with pytest.raises(mc.ConnectionUnusable, match="TS_TEST_MODEL_KEY is not set"):
            mc.resolve_connection(db.session, project_key.project_id, "env")
        monkeypatch.setenv("TS_TEST_MODEL_KEY", "from-the-environment")
        resolved = mc.resolve_connection(db.session, project_key.project_id, "env")
        assert resolved.api_key == "from-the-environment"
        with pytest.raises(mc.ConnectionNotFound):
            mc.resolve_connection(db.session, project_key.project_id, "missing")


def test_allowed_hosts_on_create_and_on_use(app, dashboard, project_key):
    app.config["MODEL_CONNECTION_ALLOWED_HOSTS"] = ("api.openai.com", "*.example.net")
    assert _post(dashboard, _body()).status_code == 201
    assert (
        _post(dashboard, _body(name="gw", base_url="https://llm.example.net/v1")).status_code == 201
    )
    refused = _post(dashboard, _body(name="evil", base_url="http://169.254.169.254/latest"))
    assert refused.status_code == 422
    assert "MODEL_CONNECTION_ALLOWED_HOSTS" in refused.get_json()["error"]["message"]
    # Narrowed later: the connection stays listed but cannot be used.
    app.config["MODEL_CONNECTION_ALLOWED_HOSTS"] = ("*.example.net",)
    with app.app_context():
        with pytest.raises(mc.ConnectionUnusable, match="not allowed"):
            mc.resolve_connection(db.session, project_key.project_id, "openai-main")
        assert mc.resolve_connection(db.session, project_key.project_id, "gw").api_key == SECRET


def test_a_changed_secret_key_asks_to_re_enter_until_the_old_one_is_listed_and_rotated(
    app, dashboard, project_key
):
    assert _post(dashboard, _body()).status_code == 201
    old = app.config["SECRET_KEY"]
    app.config["SECRET_KEY"] = "a-new-secret-key"
    with app.app_context():
        with pytest.raises(mc.ConnectionUnusable, match="Re-enter the key") as failure:
            mc.resolve_connection(db.session, project_key.project_id, "openai-main")
        assert SECRET not in str(failure.value)
        (record,) = mc.list_connections(db.session, project_key.project_id)
        assert record.header_names is None and record.has_secret
        db.session.rollback()
        # The old key listed: readable again, and rotation moves everything to the new key.
        app.config["PREVIOUS_SECRET_KEYS"] = (old,)
        assert mc.resolve_connection(db.session, project_key.project_id, "openai-main").api_key
        db.session.rollback()
        report = run_write(Write(mc.rotate_all))
        assert (report.rotated, report.failed) == (1, ())
        app.config["PREVIOUS_SECRET_KEYS"] = ()
        resolved = mc.resolve_connection(db.session, project_key.project_id, "openai-main")
        assert resolved.api_key == SECRET
        assert resolved.headers == {"OpenAI-Organization": "org-hidden-77"}


def test_the_fernet_key_depends_on_the_secret_key_only():
    box = mc.cipher("one")
    token = box.encrypt(b"x")
    assert mc.cipher("one").decrypt(token) == b"x"
    assert mc.cipher("two", ["one"]).decrypt(token) == b"x"
    with pytest.raises(InvalidToken):
        mc.cipher("two").decrypt(token)
    assert mc.derive_fernet_key("one") != mc.derive_fernet_key("two")


# Few labels, so that one host often ends with another (the cases the rule is about).
_LABEL = st.sampled_from(["a", "b", "ab", "x-1", "com", "example"])
_HOST = st.lists(_LABEL, min_size=1, max_size=4).map(".".join)


@given(host=_HOST, domain=_HOST)
def test_a_wildcard_allows_exactly_the_hosts_below_its_domain(host, domain):
    allowed = mc.host_allowed(host, ["*." + domain])
    assert allowed == host.endswith("." + domain)
    assert mc.host_allowed(host.upper() + ".", ["*." + domain]) == allowed


@given(host=_HOST, other=_HOST)
def test_a_plain_entry_allows_that_host_only_and_no_entry_allows_all(host, other):
    assert mc.host_allowed(host, [host])
    assert mc.host_allowed(other, [host]) == (other == host)
    assert mc.host_allowed(other, [])


def test_the_openapi_document_describes_the_routes_with_their_models(client):
    spec = client.get("/api/openapi.json").get_json()
    paths = spec["paths"]
    schemas = spec["components"]["schemas"]
    post = paths["/api/v1/model-connections"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert body.endswith("/ModelConnectionCreate")
    assert schemas["ModelConnectionCreate"]["properties"]["api_key"]["writeOnly"] is True
    assert {"201", "403", "409", "422"} <= post["responses"].keys()
    listing = paths["/api/v1/model-connections"]["get"]["responses"]["200"]
    assert listing["content"]["application/json"]["schema"]["$ref"].endswith("/ModelConnectionList")
    delete = paths["/api/v1/model-connections/{name}"]["delete"]
    assert {"204", "403", "404"} <= delete["responses"].keys()
    # No answer can carry a secret: the answer's model has no field for one.
    assert not {"api_key", "headers", "secret"} & schemas["ModelConnectionOut"]["properties"].keys()


def test_answers_are_exactly_the_documented_models(dashboard, project_key, app):
    from webapp.api.model_connections import ModelConnectionList, ModelConnectionOut

    created = _post(dashboard, _body(api_key=None, api_key_env="OPENAI_API_KEY"))
    ModelConnectionOut.model_validate(created.get_json())
    listed = app.test_client().get(URL, headers=project_key.headers)
    ModelConnectionList.model_validate(listed.get_json())


ENVIRONMENT_MARKERS = {
    "OPENAI_API_KEY": "env-openai-key-1f2e",
    "OPENAI_ORG_ID": "env-org-3d4c",
    "OPENAI_PROJECT_ID": "env-project-5b6a",
    "OPENAI_ADMIN_KEY": "env-admin-7f8e",
    "OPENAI_CUSTOM_HEADERS": "X-Env-Openai: env-custom-9a8b",
    "ANTHROPIC_API_KEY": "env-anthropic-key-0c1d",
    "ANTHROPIC_AUTH_TOKEN": "env-auth-token-2e3f",
    "ANTHROPIC_CUSTOM_HEADERS": "X-Env-Anthropic: env-custom-4a5b",
}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_connection_sends_only_what_it_holds_not_the_servers_environment(kind, monkeypatch):
    """The SDKs read keys, organizations and extra headers from the environment when not
    given them: a connection pointed anywhere must not carry the server's own."""
    from fake_model_server import fake_model_server

    for name, value in ENVIRONMENT_MARKERS.items():
        monkeypatch.setenv(name, value)
    with fake_model_server() as fake:
        base = fake.openai_base_url if kind == "openai" else fake.anthropic_base_url
        for key in ("sk-the-connections-own", ""):
            resolved = mc.ResolvedConnection(1, "c", kind, base, None, {"X-Own": "own"}, key)
            assert mc.check_connection(resolved, timeout=10).ok
    assert len(fake.seen) == 2
    for headers in fake.seen:
        sent = repr(headers)
        leaked = [
            v.split(": ")[-1] for v in ENVIRONMENT_MARKERS.values() if v.split(": ")[-1] in sent
        ]
        assert not leaked, leaked
        assert headers["x-own"] == "own"
    assert "sk-the-connections-own" in repr(fake.seen[0])
