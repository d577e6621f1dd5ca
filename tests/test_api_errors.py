"""Bad input gets a clear JSON error with the right status, and writes nothing. Never a 500."""

from __future__ import annotations

import json

import pytest
import requests
from api_support import assert_error, native_call, row_counts, tool_item
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from webapp.db import db, utcnow
from webapp.models import ApiKey

TOOLS_URL = "/api/v1/messages/tools"
# The MessageTool endpoints answer every request error as 400, the status the unique_sdk raises
# as InvalidRequestError; the error's code tells 413, 409 and 422 apart (webapp/errors.py).
SDK_STATUS = 400
MAX_BODY = 64 * 1024
MAX_RESULT = 1000

WRITE_URLS = [
    ("post", TOOLS_URL),
    ("put", "/api/v1/conversations/c1"),
    ("post", "/api/v1/conversations/c1/messages"),
    ("post", "/api/v1/conversations/c1/turns"),
    ("post", "/api/v1/conversations/c1/messages/m1/rounds/0"),
    ("post", "/api/v1/conversations/c1/import"),
    ("put", "/api/v1/channels/bot"),
    ("post", "/api/v1/redaction-rules"),
]


@pytest.fixture
def app_config():
    return {"MAX_BODY_BYTES": MAX_BODY, "MAX_RESULT_BYTES": MAX_RESULT}


def post_tools(client, key, tools, message_id="m1"):
    return client.post(
        TOOLS_URL, json={"messageId": message_id, "tools": tools}, headers=key.headers
    )


# --- Malformed requests: 400 ------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), WRITE_URLS)
def test_malformed_json_is_400_on_every_write_endpoint(app, client, project_key, method, url):
    response = client.open(
        url,
        method=method,
        data='{"messageId": "m1", "tools": [',
        headers={**project_key.headers, "Content-Type": "application/json"},
    )
    body = assert_error(response, 400, "malformed")
    assert "malformed JSON" in body["message"]
    assert sum(row_counts(app).values()) == 0


@pytest.mark.parametrize(("method", "url"), WRITE_URLS)
def test_a_body_that_is_not_declared_json_is_400(app, client, project_key, method, url):
    response = client.open(
        url,
        method=method,
        data=json.dumps({"messageId": "m1", "tools": []}),
        headers={**project_key.headers, "Content-Type": "text/plain"},
    )
    body = assert_error(response, 400, "malformed")
    assert "application/json" in body["message"]
    assert sum(row_counts(app).values()) == 0


def test_json_with_a_charset_or_a_json_suffix_type_is_accepted(client, project_key):
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json"):
        response = client.post(
            TOOLS_URL,
            data=json.dumps({"messageId": "m1", "tools": [tool_item()]}),
            headers={**project_key.headers, "Content-Type": content_type},
        )
        assert response.status_code == 201, content_type


def test_an_empty_body_and_invalid_utf8_are_400(client, project_key):
    headers = {**project_key.headers, "Content-Type": "application/json"}
    assert_error(client.post(TOOLS_URL, data="", headers=headers), 400, "malformed")
    assert_error(client.post(TOOLS_URL, data=b"\xff\xfe{}", headers=headers), 400, "malformed")


def test_a_json_document_that_is_not_an_object_is_invalid(client, project_key):
    response = client.post(TOOLS_URL, json=[1, 2], headers=project_key.headers)
    assert_error(response, SDK_STATUS, "invalid")
    native = client.post("/api/v1/conversations/c1/messages", json=[1], headers=project_key.headers)
    assert_error(native, 422, "invalid")


# --- Authentication: 401 ---------------------------------------------------------------------


def test_a_missing_key_is_401(app, client):
    response = client.post(TOOLS_URL, json={"messageId": "m1", "tools": [tool_item()]})
    body = assert_error(response, 401, "unauthorized")
    assert "Bearer" in body["message"]
    assert sum(row_counts(app).values()) == 0


@pytest.mark.parametrize(
    "header", ["Bearer ts_not_a_real_key", "Basic dXNlcjpwYXNz", "Bearer ", "ts_no_scheme"]
)
def test_an_invalid_key_is_401(app, client, header):
    response = client.post(
        TOOLS_URL,
        json={"messageId": "m1", "tools": [tool_item()]},
        headers={"Authorization": header},
    )
    assert_error(response, 401, "unauthorized")
    assert sum(row_counts(app).values()) == 0


def test_a_revoked_key_is_401(app, client, project_key):
    with app.app_context():
        db.session.execute(update(ApiKey).values(revoked_at=utcnow()))
        db.session.commit()
    body = assert_error(post_tools(client, project_key, [tool_item()]), 401, "unauthorized")
    assert "revoked" in body["message"]
    assert row_counts(app)["tool_invocation"] == 0


def test_401_comes_before_the_body_is_judged(client):
    response = client.post(TOOLS_URL, data="{oops", headers={"Content-Type": "application/json"})
    assert_error(response, 401, "unauthorized")


@pytest.mark.parametrize(
    "url",
    [
        TOOLS_URL + "?messageIds=m1",
        "/api/v1/conversations",
        "/api/v1/conversations/c1",
        "/api/v1/channels",
        "/api/v1/redaction-rules",
    ],
)
def test_reads_need_a_key_too(client, url):
    assert_error(client.get(url), 401, "unauthorized")


# --- Too large: 413 --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "status"), [(TOOLS_URL, SDK_STATUS), ("/api/v1/conversations/c1/messages", 413)]
)
def test_a_body_over_the_limit_is_413_as_json(app, client, project_key, url, status):
    big = [tool_item(0, i, response="x" * 900) for i in range(50)]
    data = json.dumps({"messageId": "m1", "tools": big * 2})
    assert len(data) > MAX_BODY
    response = client.post(
        url, data=data, headers={**project_key.headers, "Content-Type": "application/json"}
    )
    body = assert_error(response, status, "too_large")
    assert body["details"][0]["limit"] == MAX_BODY
    assert sum(row_counts(app).values()) == 0


def test_a_chunked_body_over_the_limit_is_413_as_json(app, live_server, project_key):
    """No Content-Length: werkzeug counts the bytes as they arrive and stops at the limit."""

    def chunks():
        yield b'{"messageId": "m1", "tools": [], "padding": "'
        for _ in range(MAX_BODY // 1000 + 5):
            yield b"x" * 1000
        yield b'"}'

    response = requests.post(
        live_server + TOOLS_URL,
        data=chunks(),
        headers={**project_key.headers, "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == SDK_STATUS
    assert response.json()["error"]["code"] == "too_large"
    assert sum(row_counts(app).values()) == 0


def test_a_chunked_body_under_the_limit_is_accepted(live_server, project_key):
    payload = json.dumps({"messageId": "m1", "tools": [tool_item()]}).encode()
    response = requests.post(
        live_server + TOOLS_URL,
        data=iter([payload[:10], payload[10:]]),
        headers={**project_key.headers, "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 201, response.text


# --- Invalid content: 422 (400 on the MessageTool endpoints), naming the field -------------------


@pytest.mark.parametrize(
    ("tool", "field"),
    [
        ({**tool_item(), "roundIndex": -1}, "tools.1.roundIndex"),
        ({**tool_item(), "sequenceIndex": -3}, "tools.1.sequenceIndex"),
        ({**tool_item(), "roundIndex": 2**31}, "tools.1.roundIndex"),
        ({**tool_item(), "roundIndex": "first"}, "tools.1.roundIndex"),
        # Strict types: no number from a string or a boolean.
        ({**tool_item(), "roundIndex": "3"}, "tools.1.roundIndex"),
        ({**tool_item(), "sequenceIndex": True}, "tools.1.sequenceIndex"),
        ({**tool_item(), "arguments": ["not", "an", "object"]}, "tools.1.arguments"),
        ({**tool_item(), "functionName": 42}, "tools.1.functionName"),
        ({**tool_item(), "functionName": ""}, "tools.1.functionName"),
        ({**tool_item(), "functionName": "f\x00"}, "tools.1.functionName"),
        ({**tool_item(), "externalToolCallId": "x" * 256}, "tools.1.externalToolCallId"),
        ({**tool_item(), "response": {"content": 7}}, "tools.1.response.content"),
        ({k: v for k, v in tool_item().items() if k != "functionName"}, "tools.1.functionName"),
    ],
)
def test_invalid_tool_fields_are_refused_with_their_path(app, client, project_key, tool, field):
    response = post_tools(client, project_key, [tool_item(0, 0), tool])
    assert_error(response, SDK_STATUS, "invalid", field=field)
    assert sum(row_counts(app).values()) == 0


def test_a_result_over_the_size_limit_is_422_naming_the_limit(app, client, project_key):
    tools = [tool_item(0, 0, response="ok"), tool_item(0, 1, response="é" * 501)]  # 1002 bytes
    body = assert_error(
        post_tools(client, project_key, tools),
        SDK_STATUS,
        "invalid",
        field="tools.1.response.content",
    )
    assert body["details"][0]["limit"] == MAX_RESULT
    assert "1002 bytes" in body["message"]
    assert sum(row_counts(app).values()) == 0


def test_nan_in_arguments_is_422(app, client, project_key):
    response = client.post(
        TOOLS_URL,
        data='{"messageId": "m1", "tools": [{"externalToolCallId": "", "functionName": "f", '
        '"arguments": {"x": NaN}, "roundIndex": 0, "sequenceIndex": 0}]}',
        headers={**project_key.headers, "Content-Type": "application/json"},
    )
    assert_error(response, SDK_STATUS, "invalid", field="tools.0.arguments")
    assert sum(row_counts(app).values()) == 0


def test_nul_characters_in_results_and_arguments_are_stored_as_replacement_chars(
    client, project_key
):
    tools = [tool_item(0, 0, arguments={"q": "a\x00b"}, response="out\x00put")]
    stored = post_tools(client, project_key, tools).get_json()["data"][0]
    assert stored["arguments"] == {"q": "a\ufffdb"}
    assert stored["response"]["content"] == "out\ufffdput"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": [{"id": "m1", "role": "robot"}]}, "messages.0.role"),
        ({"messages": [{"id": "m1", "role": "user", "status": "done"}]}, "messages.0.status"),
        (
            {"messages": [{"id": "m1", "role": "user", "created_at": "yesterday"}]},
            "messages.0.created_at",
        ),
        ({"messages": [{"id": "m1", "role": "user", "colour": "red"}]}, "messages.0.colour"),
        ({"messages": [{"id": "", "role": "user"}]}, "messages.0.id"),
        ({"messages": [{"id": "a", "role": "user", "status": "completed"}]}, "messages.0.status"),
        (
            {"messages": [{"id": "a", "role": "user", "tool_calls": [native_call()]}]},
            "messages.0.tool_calls",
        ),
        (
            {
                "messages": [
                    {"id": "a", "role": "assistant", "tool_calls": [native_call(round_index=-1)]}
                ]
            },
            "messages.0.tool_calls.0.round_index",
        ),
        (
            {
                "messages": [
                    {
                        "id": "a",
                        "role": "assistant",
                        "usage": [{"round_index": 0, "input_tokens": -5}],
                    }
                ]
            },
            "messages.0.usage.0.input_tokens",
        ),
    ],
)
def test_invalid_messages_are_422_with_their_path(app, client, project_key, body, field):
    response = client.post(
        "/api/v1/conversations/c1/messages", json=body, headers=project_key.headers
    )
    assert_error(response, 422, "invalid", field=field)
    assert sum(row_counts(app).values()) == 0


def test_a_negative_round_in_the_url_is_422(app, client, project_key):
    response = client.post(
        "/api/v1/conversations/c1/messages/m1/rounds/-1",
        json={"calls": [{"id": "c", "name": "search"}]},
        headers=project_key.headers,
    )
    assert_error(response, 422, "invalid", field="path.round_index")
    assert sum(row_counts(app).values()) == 0


def test_an_over_long_conversation_id_in_the_url_is_422(app, client, project_key):
    response = client.post(
        "/api/v1/conversations/" + "c" * 256 + "/messages",
        json={"messages": [{"id": "m1", "role": "user"}]},
        headers=project_key.headers,
    )
    assert_error(response, 422, "invalid", field="path.cid")
    assert sum(row_counts(app).values()) == 0


def test_metadata_with_nan_is_422(app, client, project_key):
    response = client.put(
        "/api/v1/conversations/c1",
        data='{"metadata": {"score": NaN}}',
        headers={**project_key.headers, "Content-Type": "application/json"},
    )
    assert_error(response, 422, "invalid", field="metadata")
    assert sum(row_counts(app).values()) == 0


# --- Never a 500 ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
tool_like = st.fixed_dictionaries(
    {},
    optional={
        "externalToolCallId": json_values,
        "functionName": json_values,
        "arguments": json_values,
        "roundIndex": st.integers() | json_values,
        "sequenceIndex": st.integers() | json_values,
        "response": st.none() | st.fixed_dictionaries({"content": json_values}),
    },
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries({"messageId": json_values, "tools": st.lists(tool_like, max_size=4)}),
    st.fixed_dictionaries({"messages": st.lists(json_values, max_size=3)}),
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies, target=st.sampled_from(WRITE_URLS))
def test_arbitrary_json_never_causes_a_server_error(client, project_key, body, target):
    method, url = target
    response = client.open(url, method=method, json=body, headers=project_key.headers)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert response.is_json


@pytest.mark.parametrize(
    ("url", "field", "status"),
    [
        ("/api/v1/messages/tools?messageIds=a%00b", "query.messageIds", SDK_STATUS),
        ("/api/v1/conversations/a%00b", "path.cid", 422),
        ("/api/v1/conversations?q=a%00", "query.q", 422),
        ("/api/v1/conversations?channel=a%00", "query.channel", 422),
    ],
)
def test_nul_in_a_url_is_invalid_not_a_database_error(client, project_key, url, field, status):
    assert_error(client.get(url, headers=project_key.headers), status, "invalid", field=field)


def test_a_forged_cursor_names_no_page(client, project_key):
    import base64

    # Of the document's shape (URL-safe base64), but not one of ours: 404, as for an unknown id.
    naive = base64.urlsafe_b64encode(b"2026-01-01T00:00:00|5").decode()
    response = client.get(f"/api/v1/conversations?cursor={naive}", headers=project_key.headers)
    assert_error(response, 404, "not_found", field="query.cursor")
    response = client.get("/api/v1/conversations?cursor=a%2Fb", headers=project_key.headers)
    assert_error(response, 422, "invalid", field="query.cursor")


# A valid body for every write endpoint; the property below breaks one leaf at a time.
VALID_BODIES = {
    ("post", TOOLS_URL): {"messageId": "m1", "tools": [tool_item(0, 0, response="ok")]},
    ("put", "/api/v1/conversations/c1"): {
        "title": "t",
        "channel": "bot",
        "metadata": {"a": [1, "x"]},
        "system_prompt": "s",
        "tools": [{"name": "f", "description": "d", "parameters": {"type": "object"}}],
        "created_at": "2026-03-10T09:00:00Z",
    },
    ("post", "/api/v1/conversations/c1/messages"): {
        "messages": [
            {"id": "u1", "role": "user", "content": "hi"},
            {
                "id": "a1",
                "role": "assistant",
                "content": "x",
                "model": "gpt-4o",
                "status": "completed",
                "usage": [
                    {"round_index": 0, "input_tokens": 5, "output_tokens": 1, "provider": "openai"}
                ],
                "tool_calls": [
                    native_call(
                        0,
                        0,
                        response={"content": "r", "is_error": False},
                        started_at="2026-03-10T09:00:00Z",
                    )
                ],
            },
        ]
    },
    ("post", "/api/v1/conversations/c1/turns"): {
        "user": {"id": "u1", "content": "hi"},
        "assistant": {
            "id": "a1",
            "content": "x",
            "rounds": [
                {"usage": {"input_tokens": 1}, "calls": [{"id": "c", "name": "f", "arguments": {}}]}
            ],
        },
    },
    ("post", "/api/v1/conversations/c1/messages/m1/rounds/0"): {
        "calls": [{"id": "c", "name": "f", "arguments": {"q": 1}, "response": {"content": "r"}}],
        "usage": {"model": "gpt-4o"},
        "status": "in_progress",
    },
    ("post", "/api/v1/conversations/c1/import"): {
        "format": "anthropic",
        "system": "s",
        "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": "b"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}],
            },
        ],
    },
    ("put", "/api/v1/channels/bot"): {"freshness_seconds": 5},
    ("post", "/api/v1/redaction-rules"): {
        "name": "r",
        "kind": "redact_paths",
        "value": ["a.b"],
        "function_name": "f*",
    },
}

NASTY = [
    None,
    "",
    "\x00",
    "a\x00b",
    "x" * 300,
    -1,
    2**31,
    2**70,
    1.5,
    float("nan"),
    float("inf"),
    True,
    [],
    {},
    {"\x00": "\x00"},
    ["\x00"],
    "2026-13-45T99:00:00",
]


def _leaf_paths(value, prefix=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaf_paths(item, (*prefix, i))
    yield prefix


def _replace(value, path, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), target=st.sampled_from(sorted(VALID_BODIES)))
def test_breaking_any_field_of_a_valid_body_never_causes_a_server_error(
    client, project_key, data, target
):
    method, url = target
    body = VALID_BODIES[target]
    path = data.draw(st.sampled_from(list(_leaf_paths(body))))
    broken = _replace(body, path, data.draw(st.sampled_from(NASTY)))
    response = client.open(
        url,
        method=method,
        data=json.dumps(broken),  # NaN and Infinity go out as bare literals
        headers={**project_key.headers, "Content-Type": "application/json"},
    )
    assert response.status_code < 500, (path, response.get_data(as_text=True))


# --- Constraint violations, ids and types the request gets wrong: 422, never 500 or 503 --------


def test_a_message_id_twice_in_one_request_is_409_naming_the_second(app, client, project_key):
    # No document schema can say that ids in a list differ: a conflict, not a malformed request.
    body = {"messages": [{"id": "a", "role": "user"}, {"id": "a", "role": "assistant"}]}
    response = client.post(
        "/api/v1/conversations/c1/messages", json=body, headers=project_key.headers
    )
    error = assert_error(response, 409, "conflict", field="messages.1.id")
    assert error["details"][0]["duplicate_of"] == "messages.0"
    assert sum(row_counts(app).values()) == 0


def test_duplicate_tool_names_are_409_naming_the_second(app, client, project_key):
    tools = [{"name": "search"}, {"name": "fetch"}, {"name": "search"}]
    response = client.put(
        "/api/v1/conversations/c1", json={"tools": tools}, headers=project_key.headers
    )
    error = assert_error(response, 409, "conflict", field="tools.2.name")
    assert error["details"][0]["duplicate_of"] == "tools.0"
    assert sum(row_counts(app).values()) == 0


@pytest.mark.parametrize("rule_id", ["2147483648", "99999999999999999999", "0"])
def test_a_rule_id_out_of_range_is_422(client, project_key, rule_id):
    response = client.delete(f"/api/v1/redaction-rules/{rule_id}", headers=project_key.headers)
    assert_error(response, 422, "invalid", field="path.rule_id")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"sequence_index": True}, "messages.0.tool_calls.0.sequence_index"),
        ({"round_index": "3"}, "messages.0.tool_calls.0.round_index"),
        ({"round_index": 1.5}, "messages.0.tool_calls.0.round_index"),
        ({"response": {"content": "x", "is_error": "yes"}}, "messages.0.tool_calls.0.response"),
        ({"created_at": "39"}, "messages.0.tool_calls.0.created_at"),
    ],
)
def test_native_fields_have_strict_types(app, client, project_key, change, field):
    message = {"id": "a1", "role": "assistant", "tool_calls": [native_call(**change)]}
    response = client.post(
        "/api/v1/conversations/c1/messages",
        json={"messages": [message]},
        headers=project_key.headers,
    )
    error = assert_error(response, 422, "invalid")
    assert error["param"].startswith(field), error
    assert sum(row_counts(app).values()) == 0


def test_an_integer_valued_number_is_an_integer(client, project_key):
    # 39916800.0 is an integer in JSON Schema (and in the OpenAPI document's eyes).
    response = client.put(
        "/api/v1/channels/bot", json={"freshness_seconds": 39916800.0}, headers=project_key.headers
    )
    assert response.status_code == 201 and response.get_json()["freshness_seconds"] == 39916800
    message = {"id": "a1", "role": "assistant", "tool_calls": [native_call(round_index=2.0)]}
    response = client.post(
        "/api/v1/conversations/c1/messages",
        json={"messages": [message]},
        headers=project_key.headers,
    )
    assert response.status_code == 201
    assert response.get_json()["data"][0]["tool_calls"][0]["round_index"] == 2


def test_a_channel_window_is_an_integer_not_a_boolean(client, project_key):
    response = client.put(
        "/api/v1/channels/bot", json={"freshness_seconds": True}, headers=project_key.headers
    )
    assert_error(response, 422, "invalid", field="freshness_seconds")


# --- HTTP details: 405 with Allow, nosniff -----------------------------------------------------


def test_a_wrong_method_is_405_with_allow(client, project_key):
    response = client.patch("/api/v1/conversations/c1", headers=project_key.headers)
    assert_error(response, 405, "method_not_allowed")
    assert set(response.headers["Allow"].split(", ")) >= {"GET", "PUT"}


@pytest.mark.parametrize(
    "url", ["/api/v1/conversations", "/api/v1/nowhere", "/api/openapi.json", "/api/swagger"]
)
def test_api_answers_are_not_sniffed(client, project_key, url):
    response = client.get(url, headers=project_key.headers)
    assert response.headers["X-Content-Type-Options"] == "nosniff"
