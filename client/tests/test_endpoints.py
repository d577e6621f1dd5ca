"""What each method sends: the endpoint, the body the API expects, split within the limits."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from toolscope_client import ToolscopeClient, __version__


def tool_items(count: int) -> list[dict[str, Any]]:
    return [
        {
            "externalToolCallId": f"call_{n}",
            "functionName": "search",
            "arguments": {"q": n},
            "roundIndex": n // 10,
            "sequenceIndex": n % 10,
        }
        for n in range(count)
    ]


def calls(count: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": f"c{n}", "name": "search", "arguments": {}, **extra} for n in range(count)]


def test_every_request_carries_the_key_and_the_client_version(toolscope, make_client):
    make_client(toolscope.url).put_conversation("chat-1", title="t")

    (put,) = toolscope.api_calls()
    assert put.headers["Authorization"] == "Bearer ts_test"
    assert put.headers["Content-Type"] == "application/json"
    assert put.headers["User-Agent"] == f"toolscope-client/{__version__}"


@pytest.mark.parametrize("suffix", ["", "/", "/api/v1", "/api/v1/"])
def test_the_server_root_or_the_api_root_is_accepted(toolscope, make_client, suffix):
    client = make_client(toolscope.url + suffix)

    assert client.api_base == toolscope.url + "/api/v1"


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://host", "http://"])
def test_a_base_url_that_is_not_http_is_refused_at_once(url):
    with pytest.raises(ValueError, match="http"):
        ToolscopeClient(url, "k")


def test_ids_are_quoted_as_one_path_segment(toolscope, make_client):
    make_client(toolscope.url).record_round("chat/1 ?x", "msg/2", 3, calls(1))

    (post,) = toolscope.api_calls()
    assert post.path == "/conversations/chat/1 ?x/messages/msg/2/rounds/3"
    assert post.query == {}


def test_120_tools_are_posted_in_batches_of_50_and_merged(toolscope, make_client):
    answer = make_client(toolscope.url).create_message_tools("msg-1", tool_items(120))

    posts = toolscope.api_calls("POST")
    assert [len(p.body["tools"]) for p in posts] == [50, 50, 20]
    assert {p.body["messageId"] for p in posts} == {"msg-1"}
    assert [t["externalToolCallId"] for t in answer["data"]] == [f"call_{n}" for n in range(120)]
    assert answer["object"] == "list" and answer["has_more"] is False


def test_450_ids_are_read_in_gets_of_200_without_duplicates(toolscope, make_client):
    ids = [f"m{n}" for n in range(450)] + ["m0", " ", ""]

    answer = make_client(toolscope.url).get_message_tools(ids)

    gets = toolscope.api_calls("GET")
    assert [len(g.query["messageIds"][0].split(",")) for g in gets] == [200, 200, 50]
    assert [t["messageId"] for t in answer["data"]] == [f"m{n}" for n in range(450)]


def test_no_ids_sends_nothing(toolscope, make_client):
    client = make_client(toolscope.url)

    assert client.get_message_tools(" , ") == {"object": "list", "data": [], "has_more": False}
    assert toolscope.seen == []


def test_put_conversation_sends_what_is_given_and_normalises_tools(toolscope, make_client):
    openai_tool = {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather", "parameters": {"a": 1}},
    }
    anthropic_tool = {"name": "lookup", "input_schema": {"b": 2}}

    make_client(toolscope.url).put_conversation(
        "chat-1", channel="bot", tools=[openai_tool, anthropic_tool]
    )

    (put,) = toolscope.api_calls()
    assert put.method == "PUT" and put.path == "/conversations/chat-1"
    assert put.body == {
        "channel": "bot",
        "tools": [
            {"name": "get_weather", "description": "Weather", "parameters": {"a": 1}},
            {"name": "lookup", "parameters": {"b": 2}},
        ],
    }


def test_a_turn_is_one_request_without_role_and_round_index(toolscope, make_client):
    make_client(toolscope.url).record_turn(
        "chat-1",
        user={"id": "u1", "role": "user", "content": "hi"},
        assistant={"id": "a1", "role": "assistant", "content": "done"},
        rounds=[{"usage": {"input_tokens": 3}, "calls": calls(2, round_index=0)}],
    )

    (post,) = toolscope.api_calls()
    assert post.path == "/conversations/chat-1/turns"
    assert post.body["assistant"] == {
        "id": "a1",
        "content": "done",
        "rounds": [{"usage": {"input_tokens": 3}, "calls": calls(2)}],
    }


def test_a_turn_over_the_limit_becomes_messages_then_rounds(toolscope, make_client):
    rounds = [{"usage": {"input_tokens": r}, "calls": calls(30)} for r in range(2)]

    answer = make_client(toolscope.url).record_turn(
        "chat-1",
        user={"id": "u1", "content": "go"},
        assistant={"id": "a1", "content": "done"},
        rounds=rounds,
    )

    messages, *round_posts, read = toolscope.api_calls()
    assert messages.path == "/conversations/chat-1/messages"
    assert [m["role"] for m in messages.body["messages"]] == ["user", "assistant"]
    assert messages.body["messages"][1]["usage"] == [
        {"round_index": 0, "input_tokens": 0},
        {"round_index": 1, "input_tokens": 1},
    ]
    assert [p.path.rsplit("/", 1)[1] for p in round_posts] == ["0", "1"]
    assert [c["sequence_index"] for c in round_posts[1].body["calls"]] == list(range(30))
    assert read.method == "GET" and answer == {"object": "conversation", "id": "chat-1"}


def test_a_big_round_sends_usage_first_and_status_last(toolscope, make_client):
    answer = make_client(toolscope.url).record_round(
        "chat-1", "a1", 2, calls(120), usage={"input_tokens": 9}, status="completed"
    )

    posts = toolscope.api_calls()
    assert [len(p.body["calls"]) for p in posts] == [50, 50, 20]
    # Calls keep their place in the round across requests (the server numbers per request).
    sent = [c["sequence_index"] for p in posts for c in p.body["calls"]]
    assert sent == list(range(120))
    assert ["usage" in p.body for p in posts] == [True, False, False]
    assert [p.body.get("status") for p in posts] == [None, None, "completed"]
    # The server answers with the whole message; the last answer is the message as stored.
    assert answer["tool_calls"] == posts[-1].body["calls"]


def test_a_round_carries_the_run_s_final_answer_with_its_status(toolscope, make_client):
    make_client(toolscope.url).record_round(
        "chat-1", "a1", 2, calls(60), content="Both agree.", status="completed"
    )
    make_client(toolscope.url).record_round("chat-1", "a1", 3, [], content="Still thinking")

    posts = toolscope.api_calls()
    # The answer goes with the last request of the round, beside the status that ends the run.
    assert [p.body.get("content") for p in posts] == [None, "Both agree.", "Still thinking"]
    assert [p.body.get("status") for p in posts] == [None, "completed", None]


def test_an_empty_round_is_still_sent(toolscope, make_client):
    make_client(toolscope.url).record_round("chat-1", "a1", 0, [], status="failed")

    (post,) = toolscope.api_calls()
    assert post.body == {"calls": [], "status": "failed"}


def test_messages_are_split_by_count_and_by_calls_in_order(toolscope, make_client):
    messages: list[dict[str, Any]] = [{"id": f"u{n}", "role": "user"} for n in range(520)]
    messages.append(
        {"id": "a-big", "role": "assistant", "tool_calls": calls(60, round_index=0)}
    )
    messages.append({"id": "a-small", "role": "assistant", "tool_calls": calls(5, round_index=1)})

    stored = make_client(toolscope.url).record_messages("chat-1", messages)

    sent = [(p.path.rsplit("/", 2)[-1], p.body) for p in toolscope.api_calls()]
    assert [len(body.get("messages", [])) for _, body in sent] == [500, 21, 0, 0, 1]
    assert "tool_calls" not in sent[1][1]["messages"][-1]
    assert [len(body.get("calls", [])) for _, body in sent[2:4]] == [50, 10]
    assert [m["id"] for m in stored] == [m["id"] for m in messages]


def test_an_openai_responses_import_sends_input(toolscope, make_client):
    make_client(toolscope.url).import_conversation(
        "chat-1", [{"role": "user", "content": "hi"}], format="openai-responses", system="s"
    )

    (post,) = toolscope.api_calls()
    assert post.path == "/conversations/chat-1/import"
    assert post.body == {
        "format": "openai-responses",
        "input": [{"role": "user", "content": "hi"}],
        "system": "s",
    }


def test_arguments_with_datetimes_and_sets_are_sent_as_json(toolscope, make_client):
    when = datetime(2026, 3, 10, 9, 30, tzinfo=timezone.utc)
    item = {**tool_items(1)[0], "arguments": {"at": when, "tags": {"a"}, "obj": object()}}

    make_client(toolscope.url).create_message_tools("msg-1", [item])

    arguments = toolscope.api_calls()[0].body["tools"][0]["arguments"]
    assert arguments["at"] == "2026-03-10T09:30:00+00:00" and arguments["tags"] == ["a"]
    assert arguments["obj"].startswith("<object object")
