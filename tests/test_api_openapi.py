"""The OpenAPI document describes every endpoint with the pydantic models that validate it,
and the docs page renders offline."""

from __future__ import annotations

from typing import Any

import pytest
from browser_support import (
    chromium_fixture,  # noqa: F401
    new_page,
)

from webapp.api import calls, meta, schemas

ENDPOINTS = {
    ("/api/v1/messages/tools", "post"): (
        schemas.MessageToolsCreate,
        "201",
        schemas.MessageToolList,
    ),
    ("/api/v1/messages/tools", "get"): (None, "200", schemas.MessageToolList),
    ("/api/v1/conversations", "get"): (None, "200", schemas.ConversationList),
    ("/api/v1/conversations/{cid}", "put"): (
        schemas.ConversationPut,
        "201",
        schemas.ConversationOut,
    ),
    ("/api/v1/conversations/{cid}", "get"): (None, "200", schemas.ConversationDetail),
    ("/api/v1/conversations/{cid}/messages", "post"): (
        schemas.MessagesCreate,
        "201",
        schemas.MessageList,
    ),
    ("/api/v1/conversations/{cid}/turns", "post"): (schemas.TurnCreate, "201", schemas.TurnOut),
    ("/api/v1/conversations/{cid}/messages/{mid}/rounds/{round_index}", "post"): (
        schemas.RoundCreate,
        "201",
        schemas.MessageOut,
    ),
    ("/api/v1/conversations/{cid}/import", "post"): (
        schemas.ImportCreate,
        "201",
        schemas.ConversationDetail,
    ),
    ("/api/v1/channels/{name}", "put"): (schemas.ChannelPut, "201", schemas.ChannelOut),
    ("/api/v1/channels", "get"): (None, "200", schemas.ChannelList),
    ("/api/v1/redaction-rules", "get"): (None, "200", schemas.RedactionRuleList),
    ("/api/v1/redaction-rules", "post"): (
        schemas.RedactionRuleCreate,
        "201",
        schemas.RedactionRuleOut,
    ),
    ("/api/v1/redaction-rules/{rule_id}", "delete"): (None, "204", None),
    ("/api/v1/meta", "get"): (None, "200", meta.MetaOut),
    ("/api/v1/calls", "get"): (None, "200", calls.CallList),
    ("/api/v1/conversations/{cid}", "delete"): (None, "204", None),
}


@pytest.fixture
def spec(client) -> dict[str, Any]:
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    return response.get_json()


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    assert ref.startswith("#/components/schemas/"), ref
    return spec["components"]["schemas"][ref.rsplit("/", 1)[1]]


def _all_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for v in node.values() for r in _all_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _all_refs(v)]
    return []


def test_the_document_is_openapi_3_1_with_bearer_security(spec):
    assert spec["openapi"] == "3.1.0"
    assert spec["info"]["title"] == "Toolscope API"
    assert spec["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}


def test_every_endpoint_is_documented_with_security_and_errors(spec):
    documented = {
        (path, method)
        for path, item in spec["paths"].items()
        if path.startswith("/api/v1/")
        for method in item
    }
    assert set(ENDPOINTS) <= documented
    for path, method in ENDPOINTS:
        operation = spec["paths"][path][method]
        assert operation["security"] == [{"bearer": []}], (path, method)
        assert operation["summary"]
        for status in ("401", "414"):  # a wrong key, or a URL over gunicorn's limit
            error = operation["responses"][status]["content"]["application/json"]["schema"]
            document = _resolve(spec, error)
            assert document["properties"].keys() == {"error"}
            error_object = _resolve(spec, document["properties"]["error"])
            assert error_object["properties"].keys() == {
                "message", "type", "code", "param", "details"
            }
        if "requestBody" in operation:  # too slow, too large, lost a write race twice
            declared = {"408", "503"} | ({"400"} if "messages/tools" in path else {"413"})
            assert declared <= operation["responses"].keys(), (path, method)


@pytest.mark.parametrize(("path", "method"), list(ENDPOINTS))
def test_request_and_response_schemas_are_the_pydantic_models(spec, path, method):
    request_model, status, response_model = ENDPOINTS[(path, method)]
    operation = spec["paths"][path][method]
    if request_model is None:
        assert "requestBody" not in operation
    else:
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].endswith("/" + request_model.__name__)
        documented = _resolve(spec, body)
        expected = request_model.model_json_schema()
        assert documented["properties"].keys() == expected["properties"].keys()
        assert set(documented.get("required", [])) == set(expected.get("required", []))
    assert status in operation["responses"]
    if response_model is not None:
        answer = operation["responses"][status]["content"]["application/json"]["schema"]
        assert answer["$ref"].endswith("/" + response_model.__name__)


def test_every_reference_resolves(spec):
    names = set(spec["components"]["schemas"])
    for ref in _all_refs(spec["paths"]) + _all_refs(spec["components"]):
        assert ref.rsplit("/", 1)[1] in names, ref


def test_path_and_query_parameters_are_documented(spec):
    rounds = spec["paths"]["/api/v1/conversations/{cid}/messages/{mid}/rounds/{round_index}"]
    names = {p["name"] for p in rounds["post"]["parameters"] if p["in"] == "path"}
    assert names == {"cid", "mid", "round_index"}
    listing = spec["paths"]["/api/v1/conversations"]["get"]["parameters"]
    query = {p["name"] for p in listing if p["in"] == "query"}
    assert query == {"channel", "q", "range", "limit", "cursor"}


def test_the_docs_pages_are_served_from_this_server(client):
    index = client.get("/api/")
    assert index.status_code == 200
    swagger = client.get("/api/swagger")
    assert swagger.status_code == 200
    html = swagger.get_data(as_text=True)
    assert "swagger-ui-bundle.js" in html
    assert "https://" not in html and "http://" not in html.replace("http://localhost", "")
    with client.get("/api/swagger/js/swagger-ui-bundle.js") as bundle:
        assert bundle.status_code == 200


@pytest.mark.browser
def test_swagger_ui_renders_every_operation_without_leaving_the_server(app, live_server, chromium):
    if app.config["DATABASE_URL"].startswith("postgresql"):
        pytest.skip("the docs page does not touch the database; one run is enough")
    requested: list[str] = []
    with new_page(chromium) as page:
        page.on("request", lambda request: requested.append(request.url))
        page.goto(live_server + "/api/swagger")
        page.wait_for_selector(".opblock", timeout=15_000)
        operations = page.locator(".opblock").count()
        errors = page.locator(".errors-wrapper").count()
    assert operations >= len(ENDPOINTS)
    assert errors == 0
    foreign = [url for url in requested if not url.startswith(live_server)]
    assert foreign == [], foreign


def test_real_answers_match_the_documented_models_exactly(client, project_key):
    """Response models forbid extra fields, so this checks the docs against the code."""
    h = project_key.headers
    answers = [
        (
            schemas.ConversationOut,
            client.put(
                "/api/v1/conversations/c1",
                headers=h,
                json={"title": "t", "channel": "bot", "tools": [{"name": "search"}]},
            ),
        ),
        (
            schemas.MessageToolList,
            client.post(
                "/api/v1/messages/tools",
                headers=h,
                json={
                    "messageId": "a1",
                    "tools": [
                        {
                            "externalToolCallId": "x",
                            "functionName": "search",
                            "roundIndex": 0,
                            "sequenceIndex": 0,
                            "response": {"content": "r"},
                        }
                    ],
                },
            ),
        ),
        (
            schemas.MessageList,
            client.post(
                "/api/v1/conversations/c1/messages",
                headers=h,
                json={
                    "messages": [
                        {
                            "id": "a1",
                            "role": "assistant",
                            "content": "done",
                            "model": "gpt-4o",
                            "usage": [{"round_index": 0, "input_tokens": 3, "output_tokens": 1}],
                        }
                    ]
                },
            ),
        ),
        (
            schemas.TurnOut,
            client.post(
                "/api/v1/conversations/c1/turns",
                headers=h,
                json={
                    "user": {"id": "u2", "content": "more"},
                    "assistant": {
                        "id": "a2",
                        "rounds": [{"calls": [{"id": "y", "name": "search"}]}],
                    },
                },
            ),
        ),
        (
            schemas.MessageOut,
            client.post(
                "/api/v1/conversations/c1/messages/a3/rounds/0", headers=h, json={"calls": []}
            ),
        ),
        (
            schemas.ConversationDetail,
            client.post(
                "/api/v1/conversations/c2/import",
                headers=h,
                json={"format": "openai-chat", "messages": [{"role": "user", "content": "hi"}]},
            ),
        ),
        (schemas.ConversationDetail, client.get("/api/v1/conversations/c1", headers=h)),
        (schemas.ConversationList, client.get("/api/v1/conversations", headers=h)),
        (schemas.MessageToolList, client.get("/api/v1/messages/tools?messageIds=a1", headers=h)),
        (
            schemas.ChannelOut,
            client.put("/api/v1/channels/bot", headers=h, json={"freshness_seconds": 60}),
        ),
        (schemas.ChannelList, client.get("/api/v1/channels", headers=h)),
        (
            schemas.RedactionRuleOut,
            client.post(
                "/api/v1/redaction-rules",
                headers=h,
                json={"name": "r", "kind": "mask", "value": ["email"]},
            ),
        ),
        (schemas.RedactionRuleList, client.get("/api/v1/redaction-rules", headers=h)),
        (schemas.ErrorOut, client.get("/api/v1/conversations/nope", headers=h)),
    ]
    for model, response in answers:
        assert response.status_code < 500, response.get_data(as_text=True)
        model.model_validate(response.get_json())


def test_a_round_body_documents_the_final_answer_it_may_carry(spec):
    content = spec["components"]["schemas"]["RoundCreate"]["properties"]["content"]
    assert "final answer" in content["description"]
