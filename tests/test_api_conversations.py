"""The native API: conversations, messages, whole turns and per-round appends."""

from __future__ import annotations

import pytest
from api_support import assert_error, native_call, row_counts, tool_item

from webapp.ingest.token_pass import MESSAGES, count_pending

BASE = "/api/v1/conversations"


def put(client, key, cid, **body):
    return client.put(f"{BASE}/{cid}", json=body, headers=key.headers)


def post_messages(client, key, cid, *messages):
    return client.post(
        f"{BASE}/{cid}/messages", json={"messages": list(messages)}, headers=key.headers
    )


def get(client, key, cid):
    return client.get(f"{BASE}/{cid}", headers=key.headers)


# --- PUT /conversations/{cid} ------------------------------------------------------------------


def test_put_creates_then_updates_only_the_fields_given(client, project_key):
    created = put(
        client,
        project_key,
        "c1",
        title="Vendor onboarding",
        channel="support-bot",
        metadata={"user": "u42"},
        system_prompt="You are helpful.",
        tools=[
            {
                "name": "vendor_lookup",
                "description": "Find a vendor",
                "parameters": {"type": "object"},
            }
        ],
        created_at="2026-03-10T09:00:00",
    )
    assert created.status_code == 201
    body = created.get_json()
    assert body["id"] == "c1" and body["channel"] == "support-bot"
    assert body["created_at"] == "2026-03-10T09:00:00Z"  # naive is taken as UTC
    assert body["tools"] == [
        {"name": "vendor_lookup", "description": "Find a vendor", "parameters": {"type": "object"}}
    ]

    updated = put(client, project_key, "c1", title="Renamed")
    assert updated.status_code == 200
    body = updated.get_json()
    assert body["title"] == "Renamed"
    assert body["metadata"] == {"user": "u42"} and body["system_prompt"] == "You are helpful."
    assert len(body["tools"]) == 1

    replaced = put(client, project_key, "c1", tools=[]).get_json()
    assert replaced["tools"] == []


def test_channels_are_created_by_name_on_first_use(client, project_key):
    put(client, project_key, "c1", channel="bot")
    put(client, project_key, "c2", channel="bot")
    channels = client.get("/api/v1/channels", headers=project_key.headers).get_json()["data"]
    assert [c["name"] for c in channels] == ["bot"]


# --- POST /conversations/{cid}/messages ------------------------------------------------------


def test_messages_with_tool_calls_and_usage_round_trip(app, client, project_key):
    response = post_messages(
        client,
        project_key,
        "c1",
        {
            "id": "u1",
            "role": "user",
            "content": "Weather in Zurich and Bern?",
            "created_at": "2026-03-10T09:00:00Z",
        },
        {
            "id": "a1",
            "role": "assistant",
            "content": "Sunny in both.",
            "created_at": "2026-03-10T10:00:05+01:00",
            "model": "gpt-4o",
            "usage": [
                {
                    "round_index": 0,
                    "input_tokens": 1000,
                    "output_tokens": 50,
                    "cached_tokens": 200,
                    "provider": "openai",
                }
            ],
            "tool_calls": [
                native_call(
                    0,
                    1,
                    response="18C",
                    started_at="2026-03-10T08:00:01Z",
                    ended_at="2026-03-10T08:00:01.250Z",
                ),
                native_call(0, 0, response="20C"),
                native_call(1, 0, response={"content": "", "is_error": True}),
            ],
        },
    )
    assert response.status_code == 201
    user, assistant = response.get_json()["data"]
    # The content's tokens too are counted by the token pass, after the answer.
    assert user["role"] == "user" and user["status"] is None and user["content_tokens"] is None
    assert assistant["status"] == "completed"
    assert assistant["created_at"] == "2026-03-10T09:00:05Z"  # converted to UTC
    calls = assistant["tool_calls"]
    assert [(c["round_index"], c["sequence_index"]) for c in calls] == [(0, 0), (0, 1), (1, 0)]
    assert calls[1]["duration_ms"] == 250.0
    assert calls[2]["response"] == {  # an empty string is a response
        "content": "",
        "is_error": True,
        "created_at": calls[2]["response"]["created_at"],
    }
    # The calls' tokens are counted after the answer, by the token pass.
    assert calls[0]["arguments_tokens"] is None and calls[0]["token_method"] is None
    assert calls[0]["response_bytes"] == 3
    (usage,) = assistant["usage"]
    assert usage["model"] == "gpt-4o"  # the message's model when the round names none
    assert usage["cost_usd"] is not None and usage["price_source"]

    detail = get(client, project_key, "c1").get_json()
    assert [m["id"] for m in detail["messages"]] == ["u1", "a1"]
    assert detail["messages"][1]["tool_calls"] == calls

    with app.app_context():
        assert count_pending() == 3
        assert count_pending(kind=MESSAGES) == 2  # both contents
    assert get(client, project_key, "c1").get_json()["messages"][0]["content_tokens"] > 0
    counted = get(client, project_key, "c1").get_json()["messages"][1]["tool_calls"]
    assert counted[0]["arguments_tokens"] > 0 and counted[0]["response_tokens"] > 0
    assert counted[0]["token_method"] == "tiktoken:o200k_base"
    assert counted[2]["response_tokens"] == 0  # the empty response


def test_messages_without_times_keep_the_order_they_were_posted_in(client, project_key):
    client.post(
        "/api/v1/messages/tools",
        json={"messageId": "a1", "tools": [tool_item()]},
        headers=project_key.headers,
    )  # a placeholder, older than the user message
    post_messages(
        client,
        project_key,
        "c1",
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "a1", "role": "assistant", "content": "hello"},
    )
    messages = get(client, project_key, "c1").get_json()["messages"]
    assert [m["id"] for m in messages] == ["u1", "a1"]
    assert len(messages[1]["tool_calls"]) == 1  # the placeholder's calls came along


def test_reposting_identical_messages_is_a_no_op(app, client, project_key):
    messages = [
        {"id": "u1", "role": "user", "content": "hi"},
        {
            "id": "a1",
            "role": "assistant",
            "content": "hello",
            "tool_calls": [native_call(response="x")],
        },
    ]
    first = post_messages(client, project_key, "c1", *messages).get_json()
    again = post_messages(client, project_key, "c1", *messages)
    assert again.status_code == 201
    assert [m["tool_calls"] for m in again.get_json()["data"]] == [
        m["tool_calls"] for m in first["data"]
    ]
    assert row_counts(app)["message"] == 2 and row_counts(app)["tool_invocation"] == 1


def test_a_changed_completed_message_is_a_conflict_and_nothing_is_written(app, client, project_key):
    post_messages(client, project_key, "c1", {"id": "a1", "role": "assistant", "content": "v1"})
    before = row_counts(app)
    response = post_messages(
        client,
        project_key,
        "c1",
        {"id": "u9", "role": "user", "content": "new"},
        {"id": "a1", "role": "assistant", "content": "v2"},
    )
    body = assert_error(response, 409, "conflict", field="messages.1")
    assert body["details"][0]["conflicting"] == ["content"]
    assert row_counts(app) == before


def test_an_in_progress_message_may_change_until_it_completes(client, project_key):
    post_messages(
        client,
        project_key,
        "c1",
        {"id": "a1", "role": "assistant", "content": "Thinking", "status": "in_progress"},
    )
    done = post_messages(
        client,
        project_key,
        "c1",
        {
            "id": "a1",
            "role": "assistant",
            "content": "Done",
            "status": "completed",
            "model": "gpt-4o",
        },
    )
    assert done.status_code == 201
    assert done.get_json()["data"][0]["content"] == "Done"
    late = post_messages(
        client, project_key, "c1", {"id": "a1", "role": "assistant", "content": "Again"}
    )
    assert late.status_code == 409


def test_a_message_of_another_conversation_is_a_conflict(app, client, project_key):
    post_messages(client, project_key, "c1", {"id": "m1", "role": "user", "content": "hi"})
    before = row_counts(app)
    response = post_messages(
        client, project_key, "c2", {"id": "m1", "role": "user", "content": "hi"}
    )
    body = assert_error(response, 409, "conflict", field="messages.0.id")
    assert "another conversation" in body["message"]
    assert row_counts(app) == before


def test_too_many_messages_or_calls_in_one_request_are_refused(app, client, project_key):
    app.config["MAX_MESSAGES_PER_REQUEST"] = 3
    messages = [{"id": f"m{i}", "role": "user", "content": "x"} for i in range(4)]
    assert_error(
        post_messages(client, project_key, "c1", *messages), 413, "too_large", field="messages"
    )
    calls = [native_call(0, i) for i in range(51)]
    assert_error(
        post_messages(
            client, project_key, "c1", {"id": "a1", "role": "assistant", "tool_calls": calls}
        ),
        413,
        "too_large",
        field="messages",
    )
    assert sum(row_counts(app).values()) == 0


def test_writes_bump_updated_at_and_the_list_is_ordered_by_activity(client, project_key):
    for cid in ("c1", "c2", "c3"):
        post_messages(client, project_key, cid, {"id": f"{cid}-u", "role": "user"})
    post_messages(client, project_key, "c1", {"id": "c1-u2", "role": "user"})
    listed = client.get(BASE, headers=project_key.headers).get_json()
    assert [c["id"] for c in listed["data"]] == ["c1", "c3", "c2"]
    assert listed["data"][0]["message_count"] == 2


# --- Turns -------------------------------------------------------------------------------------


def test_a_whole_turn_in_one_request(client, project_key):
    response = client.post(
        f"{BASE}/c1/turns",
        json={
            "user": {"id": "u1", "content": "Onboard TechCorp"},
            "assistant": {
                "id": "a1",
                "content": "TechCorp is onboarded.",
                "model": "claude-sonnet-4",
                "rounds": [
                    {
                        "usage": {"input_tokens": 500, "output_tokens": 20},
                        "calls": [
                            {
                                "id": "tc_01",
                                "name": "vendor_lookup",
                                "arguments": {"name": "TechCorp"},
                                "response": {"content": "not found"},
                            }
                        ],
                    },
                    {
                        "calls": [
                            {
                                "id": "tc_02",
                                "name": "vendor_create",
                                "arguments": {},
                                "response": {"content": "ok"},
                            },
                            {
                                "id": "tc_03",
                                "name": "notify",
                                "arguments": {},
                                "response": {"content": "sent"},
                            },
                        ]
                    },
                ],
            },
        },
        headers=project_key.headers,
    )
    assert response.status_code == 201
    turn = response.get_json()
    assert turn["object"] == "turn" and turn["user"]["role"] == "user"
    calls = turn["assistant"]["tool_calls"]
    assert [(c["id"], c["round_index"], c["sequence_index"]) for c in calls] == [
        ("tc_01", 0, 0),
        ("tc_02", 1, 0),
        ("tc_03", 1, 1),
    ]
    assert turn["assistant"]["usage"][0]["round_index"] == 0
    assert turn["assistant"]["usage"][0]["model"] == "claude-sonnet-4"


def test_a_turn_with_a_bad_call_writes_nothing(app, client, project_key):
    response = client.post(
        f"{BASE}/c1/turns",
        json={
            "user": {"id": "u1", "content": "hi"},
            "assistant": {
                "id": "a1",
                "rounds": [
                    {
                        "calls": [
                            {"id": "x", "name": "f", "sequence_index": 0},
                            {"id": "y", "name": "g", "sequence_index": 0},
                        ]
                    }
                ],
            },
        },
        headers=project_key.headers,
    )
    assert_error(response, 409, "conflict", field="assistant.rounds.0.calls.1")
    assert sum(row_counts(app).values()) == 0


# --- Per-round appends (per-service-call persistence) -------------------------------------------


def post_round(client, key, index, **body):
    return client.post(f"{BASE}/c1/messages/a1/rounds/{index}", json=body, headers=key.headers)


def test_rounds_are_appended_calls_first_then_responses_then_status(client, project_key):
    calls = [
        {"id": "c0", "name": "search", "arguments": {"q": "a"}},
        {"id": "c1", "name": "search", "arguments": {"q": "b"}},
    ]
    first = post_round(
        client,
        project_key,
        0,
        calls=calls,
        usage={"model": "gpt-4o", "input_tokens": 10, "output_tokens": 5},
    )
    assert first.status_code == 201
    message = first.get_json()
    assert message["status"] == "in_progress"
    assert [c["response"] for c in message["tool_calls"]] == [None, None]

    answered = [{**c, "response": {"content": f"r{i}"}} for i, c in enumerate(calls)]
    second = post_round(client, project_key, 0, calls=answered).get_json()
    assert [c["response"]["content"] for c in second["tool_calls"]] == ["r0", "r1"]

    last = post_round(client, project_key, 1, calls=[], status="completed").get_json()
    assert last["status"] == "completed"
    assert len(last["tool_calls"]) == 2 and len(last["usage"]) == 1


def test_the_round_that_ends_a_run_carries_its_final_answer(client, project_key):
    """A run recorded round by round ends with its answer: once `status` has completed it, the
    message can no longer change (409), so the last round carries the text."""
    post_round(client, project_key, 0, calls=[{"id": "c0", "name": "search"}])
    last = post_round(client, project_key, 1, calls=[], content="Both agree.", status="completed")
    assert last.status_code == 201
    assert (last.get_json()["content"], last.get_json()["status"]) == ("Both agree.", "completed")
    again = post_round(client, project_key, 1, calls=[], content="Both agree.", status="completed")
    assert again.status_code == 201  # a retry changes nothing
    (message,) = [m for m in get(client, project_key, "c1").get_json()["messages"]]
    assert (message["content"], message["status"]) == ("Both agree.", "completed")
    other = post_round(client, project_key, 1, calls=[], content="Other text.")
    assert_error(other, 409, "conflict", field="message")


def test_a_round_usage_may_be_completed_but_not_changed(client, project_key):
    post_round(client, project_key, 0, usage={"input_tokens": 10})
    filled = post_round(client, project_key, 0, usage={"input_tokens": 10, "output_tokens": 3})
    assert filled.get_json()["usage"][0]["output_tokens"] == 3
    changed = post_round(client, project_key, 0, usage={"input_tokens": 11})
    assert_error(changed, 409, "conflict", field="usage")


# --- Reads -------------------------------------------------------------------------------------


def test_an_unknown_conversation_is_404(client, project_key):
    body = assert_error(get(client, project_key, "nope"), 404, "not_found")
    assert "nope" in body["message"]


def test_the_list_pages_with_a_cursor_and_filters(client, project_key):
    for i in range(5):
        put(client, project_key, f"conv-{i}", title=f"Topic {i % 2}", channel="a" if i < 3 else "b")
    page1 = client.get(f"{BASE}?limit=2", headers=project_key.headers).get_json()
    assert [c["id"] for c in page1["data"]] == ["conv-4", "conv-3"] and page1["has_more"]
    page2 = client.get(
        f"{BASE}?limit=2&cursor={page1['next_cursor']}", headers=project_key.headers
    ).get_json()
    page3 = client.get(
        f"{BASE}?limit=2&cursor={page2['next_cursor']}", headers=project_key.headers
    ).get_json()
    assert [c["id"] for c in page2["data"] + page3["data"]] == ["conv-2", "conv-1", "conv-0"]
    assert page3["has_more"] is False and page3["next_cursor"] is None

    by_channel = client.get(f"{BASE}?channel=b", headers=project_key.headers).get_json()
    assert {c["id"] for c in by_channel["data"]} == {"conv-3", "conv-4"}
    searched = client.get(f"{BASE}?q=topic%201", headers=project_key.headers).get_json()
    assert {c["id"] for c in searched["data"]} == {"conv-1", "conv-3"}
    wildcard = client.get(f"{BASE}?q=%25", headers=project_key.headers).get_json()
    assert wildcard["data"] == []  # LIKE wildcards in q are literal


@pytest.mark.parametrize("query", ["limit=0", "limit=201", "limit=x", "cursor=garbage!"])
def test_bad_list_parameters_are_422(client, project_key, query):
    assert_error(client.get(f"{BASE}?{query}", headers=project_key.headers), 422, "invalid")


def test_detail_and_list_run_a_constant_number_of_queries(client, project_key, count_queries):
    def fill(cid, n):
        post_messages(
            client,
            project_key,
            cid,
            *[
                {
                    "id": f"{cid}-{i}",
                    "role": "assistant",
                    "content": "x",
                    "usage": [{"round_index": 0, "input_tokens": 1}],
                    "tool_calls": [native_call(0, j, response="r") for j in range(3)],
                }
                for i in range(n)
            ],
        )

    fill("small", 1)
    fill("big", 12)
    with count_queries() as small:
        get(client, project_key, "small")
    with count_queries() as big:
        get(client, project_key, "big")
    assert small.count == big.count <= 7, big.statements
    with count_queries() as listing:
        client.get(BASE, headers=project_key.headers)
    assert listing.count <= 3, listing.statements


def test_calls_of_new_messages_are_not_read_back_but_those_of_known_ones_are(
    app, client, project_key, count_queries
):
    """A message inserted by the request's own transaction has no stored calls: no SELECT of
    tool_invocation. A resend reads them, compares, and stores nothing twice."""
    messages = [
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "a1", "role": "assistant", "tool_calls": [native_call(response="x")]},
    ]
    put(client, project_key, "c1")

    def reads_calls(counter) -> bool:
        # The write's lookup of stored calls (by message and round); the answer's own read of
        # the stored turn comes after the write and is not this.
        return any("tool_invocation.round_index IN" in s for s in counter.statements)

    with count_queries() as first:
        assert post_messages(client, project_key, "c1", *messages).status_code == 201
    with count_queries() as again:
        assert post_messages(client, project_key, "c1", *messages).status_code == 201
    assert not reads_calls(first), first.statements
    assert reads_calls(again), again.statements
    assert row_counts(app)["tool_invocation"] == 1
