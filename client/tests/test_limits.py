"""The client splits its requests to the limits the server announces (`GET /api/v1/meta`), asks
once, and falls back to the documented defaults."""

from __future__ import annotations

import copy
import logging

import pytest
from fake_toolscope import DEFAULT_META, FakeToolscope

from toolscope_client import DEFAULT_LIMITS, Limits


def items(count: int) -> list[dict]:
    return [
        {"externalToolCallId": f"c{n}", "functionName": "f", "roundIndex": 0, "sequenceIndex": n}
        for n in range(count)
    ]


def meta_with(**limits: int) -> dict:
    meta = copy.deepcopy(DEFAULT_META)
    meta["limits"].update(limits)
    return meta


def test_the_defaults_are_toolscopes_documented_limits():
    assert Limits(
        max_tools_per_request=50,
        max_ids_per_request=200,
        max_messages_per_request=500,
        max_body_bytes=8 * 1024 * 1024,
        max_result_bytes=2 * 1024 * 1024,
    ) == DEFAULT_LIMITS


def test_lower_limits_announced_by_the_server_are_followed(make_client):
    with FakeToolscope(meta=meta_with(max_tools_per_request=20, max_ids_per_request=3)) as server:
        client = make_client(server.url)
        client.create_message_tools("m", items(45))
        client.get_message_tools(["a", "b", "c", "d"])
        client.record_round("chat", "a1", 0, [{"id": "x", "name": "f"}] * 25)

    assert [len(p.body["tools"]) for p in server.api_calls("POST")[:3]] == [20, 20, 5]
    assert len(server.api_calls("GET")) == 2
    assert [len(p.body["calls"]) for p in server.api_calls("POST")[3:]] == [20, 5]
    assert server.meta_requests() == 1
    assert client.limits.max_tools_per_request == 20


def test_a_server_without_meta_gets_the_defaults_and_is_asked_once(make_client):
    with FakeToolscope(meta=None) as server:
        client = make_client(server.url)
        client.create_message_tools("m", items(120))
        client.create_message_tools("m", items(1))

    assert [len(p.body["tools"]) for p in server.api_calls()] == [50, 50, 20, 1]
    assert server.meta_requests() == 1
    assert client.limits == DEFAULT_LIMITS


def test_limits_given_to_the_client_are_not_asked_for(toolscope, make_client):
    client = make_client(toolscope.url, limits=Limits(max_tools_per_request=10))

    client.create_message_tools("m", items(25))

    assert [len(p.body["tools"]) for p in toolscope.api_calls()] == [10, 10, 5]
    assert toolscope.meta_requests() == 0


def test_a_server_that_was_down_is_asked_once_it_is_back(down_url, make_client):
    port = int(down_url.rsplit(":", 1)[1])
    client = make_client(down_url, retries=0, probe_interval=0)
    assert client.limits == DEFAULT_LIMITS

    with FakeToolscope(port, meta=meta_with(max_tools_per_request=7)) as server:
        assert client.limits.max_tools_per_request == 7

    assert server.meta_requests() == 1


def test_no_question_for_the_limits_while_an_outage_lasts(down_url, make_client):
    port = int(down_url.rsplit(":", 1)[1])
    client = make_client(down_url, retries=0, probe_interval=60)
    client.create_message_tools("m0", items(1))  # starts the outage

    with FakeToolscope(port) as server:
        client.create_message_tools("m1", items(1))  # buffered, no probe yet

    assert server.seen == [] and client.pending == 2


def test_another_api_version_is_warned_about(make_client, caplog):
    meta = {**DEFAULT_META, "api_version": 2}
    with FakeToolscope(meta=meta) as server, caplog.at_level(logging.WARNING):
        limits = make_client(server.url).limits

    assert "API version 2" in caplog.text and limits == DEFAULT_LIMITS


@pytest.mark.parametrize(
    "given",
    [
        {"max_tools_per_request": 0},
        {"max_tools_per_request": -5},
        {"max_tools_per_request": "50"},
        {"max_tools_per_request": True},
        {"max_tools_per_request": None},
        {"something_new": 3},
    ],
)
def test_unusable_values_in_the_answer_keep_their_default(given):
    meta = copy.deepcopy(DEFAULT_META)
    meta["limits"] = given

    assert Limits.from_meta(meta) == DEFAULT_LIMITS


@pytest.mark.parametrize("answer", [None, "text", [], {"limits": "x"}, {}])
def test_an_answer_without_limits_gives_the_defaults(answer):
    assert Limits.from_meta(answer) == DEFAULT_LIMITS
