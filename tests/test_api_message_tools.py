"""The MessageTool-compatible API: batch create, retrieval by message ids, idempotent retries.

Every request error here is a 400, which the unique_sdk raises as InvalidRequestError; the
error's `code` says which (`invalid`, `conflict`, `too_large`, ...)."""

from __future__ import annotations

from urllib.parse import quote

from api_support import assert_error, row_counts, tool_item

URL = "/api/v1/messages/tools"


def post_tools(client, key, message_id: str, tools: list[dict]):
    return client.post(URL, json={"messageId": message_id, "tools": tools}, headers=key.headers)


def test_create_many_returns_the_merged_call_and_response_view(client, project_key):
    tools = [
        tool_item(0, 0, call_id="call_abc123", response='{"temp": 18}'),
        tool_item(0, 1, call_id="call_def456", name="get_calendar", arguments={"date": "3-10"}),
    ]
    response = post_tools(client, project_key, "msg_xyz", tools)

    assert response.status_code == 201
    body = response.get_json()
    assert body["object"] == "list" and body["has_more"] is False
    first, second = body["data"]
    assert first["object"] == "messageTool"
    assert first["externalToolCallId"] == "call_abc123"
    assert first["functionName"] == "get_weather"
    assert first["arguments"] == {"city": "Zurich"}
    assert (first["roundIndex"], first["sequenceIndex"]) == (0, 0)
    assert first["messageId"] == "msg_xyz"
    assert first["response"]["content"] == '{"temp": 18}'
    assert first["response"]["toolCallId"] == "call_abc123"
    assert first["response"]["createdAt"].endswith("Z")
    assert first["createdAt"].endswith("Z")
    assert second["functionName"] == "get_calendar" and second["response"] is None
    assert first["id"] != second["id"]


def test_retry_of_the_same_batch_stores_once_and_answers_the_same(app, client, project_key):
    tools = [tool_item(0, i, response=f"r{i}") for i in range(3)]
    first = post_tools(client, project_key, "m1", tools)
    again = post_tools(client, project_key, "m1", tools)

    assert again.status_code == 201
    assert again.get_json() == first.get_json()
    assert row_counts(app)["tool_invocation"] == 3
    assert row_counts(app)["message"] == 1


def test_a_later_post_adds_the_response_and_a_stale_retry_changes_nothing(app, client, project_key):
    without = [tool_item(0, 0), tool_item(0, 1)]
    post_tools(client, project_key, "m1", without)
    with_responses = [tool_item(0, 0, response="sunny"), tool_item(0, 1, response="")]
    added = post_tools(client, project_key, "m1", with_responses)
    assert added.status_code == 201
    assert [t["response"]["content"] for t in added.get_json()["data"]] == ["sunny", ""]

    # A late retry of the first post (no responses) must neither fail nor erase them.
    stale = post_tools(client, project_key, "m1", without)
    assert stale.status_code == 201
    assert [t["response"]["content"] for t in stale.get_json()["data"]] == ["sunny", ""]
    assert row_counts(app)["tool_invocation"] == 2


def test_a_different_call_under_a_stored_key_is_a_conflict_and_writes_nothing(
    app, client, project_key
):
    post_tools(client, project_key, "m1", [tool_item(0, 0, response="first")])
    before = row_counts(app)
    batch = [
        tool_item(0, 1),  # new, valid: must not be stored either (all or nothing)
        tool_item(0, 0, response="second"),
    ]
    response = post_tools(client, project_key, "m1", batch)

    body = assert_error(response, 400, "conflict", field="tools.1")
    assert "round 0, sequence 0" in body["message"]
    assert body["details"][0]["conflicting"] == ["response"]
    assert row_counts(app) == before
    stored = client.get(f"{URL}?messageIds=m1", headers=project_key.headers).get_json()["data"]
    assert [t["response"]["content"] for t in stored] == ["first"]


def test_conflicting_function_name_or_arguments_is_named(client, project_key):
    post_tools(client, project_key, "m1", [tool_item(0, 0)])
    renamed = post_tools(client, project_key, "m1", [tool_item(0, 0, name="other")])
    assert assert_error(renamed, 400, "conflict")["details"][0]["conflicting"] == ["function_name"]
    changed = post_tools(client, project_key, "m1", [tool_item(0, 0, arguments={"city": "Bern"})])
    assert assert_error(changed, 400, "conflict")["details"][0]["conflicting"] == ["arguments"]


def test_the_same_key_twice_in_one_batch(app, client, project_key):
    identical = post_tools(client, project_key, "m1", [tool_item(0, 0), tool_item(0, 0)])
    assert identical.status_code == 201 and len(identical.get_json()["data"]) == 1

    different = post_tools(
        client, project_key, "m2", [tool_item(0, 0), tool_item(0, 0, name="other")]
    )
    body = assert_error(different, 400, "conflict", field="tools.1")
    assert body["details"][0]["duplicate_of"] == "tools.0"
    assert row_counts(app)["tool_invocation"] == 1


def test_get_returns_tools_of_many_messages_in_the_order_asked(client, project_key):
    post_tools(client, project_key, "b", [tool_item(1, 0), tool_item(0, 1), tool_item(0, 0)])
    post_tools(client, project_key, "a", [tool_item(0, 0)])

    response = client.get(f"{URL}?messageIds=b,unknown,a", headers=project_key.headers)

    assert response.status_code == 200
    data = response.get_json()["data"]
    assert [(t["messageId"], t["roundIndex"], t["sequenceIndex"]) for t in data] == [
        ("b", 0, 0),
        ("b", 0, 1),
        ("b", 1, 0),
        ("a", 0, 0),
    ]


def test_get_accepts_url_encoded_commas_and_repeated_parameters(client, project_key):
    post_tools(client, project_key, "m,1", [tool_item()])  # ids are split on commas anyway
    post_tools(client, project_key, "m2", [tool_item()])
    post_tools(client, project_key, "m 3", [tool_item()])

    encoded = client.get(
        f"{URL}?messageIds={quote('m2,m 3', safe='')}", headers=project_key.headers
    )
    repeated = client.get(f"{URL}?messageIds=m2&messageIds=m%203", headers=project_key.headers)

    assert [t["messageId"] for t in encoded.get_json()["data"]] == ["m2", "m 3"]
    assert [t["messageId"] for t in repeated.get_json()["data"]] == ["m2", "m 3"]


def test_get_with_an_empty_id_list_returns_nothing(client, project_key):
    response = client.get(f"{URL}?messageIds=", headers=project_key.headers)
    assert response.status_code == 200 and response.get_json()["data"] == []


def test_get_without_the_parameter_is_invalid(client, project_key):
    assert_error(
        client.get(URL, headers=project_key.headers), 400, "invalid", field="query.messageIds"
    )


def test_201_ids_are_refused_and_200_accepted(client, project_key):
    ids = ",".join(f"m{i}" for i in range(201))
    body = assert_error(
        client.get(f"{URL}?messageIds={ids}", headers=project_key.headers),
        400,
        "invalid",
        field="query.messageIds",
    )
    assert body["details"][0]["limit"] == 200
    ok = client.get(f"{URL}?messageIds={ids.rsplit(',', 1)[0]}", headers=project_key.headers)
    assert ok.status_code == 200


def test_51_tools_are_refused_and_nothing_is_written(app, client, project_key):
    tools = [tool_item(0, i) for i in range(51)]
    body = assert_error(
        post_tools(client, project_key, "m1", tools), 400, "too_large", field="tools"
    )
    assert body["details"][0]["limit"] == 50
    assert row_counts(app)["tool_invocation"] == 0
    assert row_counts(app)["message"] == 0
    assert post_tools(client, project_key, "m1", tools[:50]).status_code == 201


def test_a_write_runs_the_same_number_of_queries_for_1_or_50_tools(
    client, project_key, count_queries
):
    post_tools(client, project_key, "warm", [tool_item()])  # the key's last_used_at update
    with count_queries() as one:
        post_tools(client, project_key, "m1", [tool_item(0, 0, response="x")])
    with count_queries() as fifty:
        post_tools(client, project_key, "m50", [tool_item(0, i, response="x") for i in range(50)])
    with count_queries() as responses:
        post_tools(client, project_key, "m1", [tool_item(0, 0, response="x")])
    assert one.count == fifty.count
    # The api_state version (the key and the rules come from the worker's cache), message,
    # placeholder, insert (a message made just now has no calls to read), and the roll-ups'
    # SELECT of their rows and one INSERT or UPDATE (webapp.ingest.rollups): nothing per row.
    assert fifty.count <= 6, fifty.statements
    # A known message: version, message, its stored calls (identical: nothing to write).
    assert responses.count <= 3, responses.statements


def test_a_get_runs_one_query_for_200_messages(client, project_key, count_queries):
    for i in range(3):
        post_tools(client, project_key, f"m{i}", [tool_item(0, 0), tool_item(0, 1)])
    ids = ",".join(f"m{i}" for i in range(200))
    with count_queries() as q:
        response = client.get(f"{URL}?messageIds={ids}", headers=project_key.headers)
    assert len(response.get_json()["data"]) == 6
    assert q.count <= 2, q.statements  # the key lookup, then one query for every id


def test_tools_for_a_known_message_update_its_conversation_activity(client, project_key):
    client.post(
        "/api/v1/conversations/c1/messages",
        json={"messages": [{"id": "a1", "role": "assistant", "content": "hi"}]},
        headers=project_key.headers,
    )
    before = client.get("/api/v1/conversations/c1", headers=project_key.headers).get_json()
    post_tools(client, project_key, "a1", [tool_item()])
    after = client.get("/api/v1/conversations/c1", headers=project_key.headers).get_json()
    assert after["updated_at"] > before["updated_at"]
    assert len(after["messages"][0]["tool_calls"]) == 1


def test_tools_cannot_be_attached_to_a_user_message(app, client, project_key):
    client.post(
        "/api/v1/conversations/c1/messages",
        json={"messages": [{"id": "u1", "role": "user", "content": "hi"}]},
        headers=project_key.headers,
    )
    body = assert_error(post_tools(client, project_key, "u1", [tool_item()]), 400, "conflict")
    assert "user message" in body["message"]
    assert row_counts(app)["tool_invocation"] == 0
