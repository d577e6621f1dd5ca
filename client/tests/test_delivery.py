"""The failure policy an agent relies on: retries are safe, a 4xx is reported and dropped, and
a Toolscope that is down never raises into the agent's loop nor slows it down."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fake_toolscope import FakeToolscope

from toolscope_client import ToolscopeRequestError, ToolscopeUnavailable


def item(n: int) -> dict:
    return {"externalToolCallId": f"c{n}", "functionName": "f", "roundIndex": 0,
            "sequenceIndex": n}


def warnings(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(1 for r in caplog.records if text in r.getMessage())


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_a_transient_failure_is_retried_with_the_same_body(toolscope, make_client, status):
    toolscope.queue(status, {"error": "busy", "message": "retry"}, times=2)

    answer = make_client(toolscope.url).create_message_tools("m", [item(0)])

    posts = toolscope.api_calls("POST")
    assert len(posts) == 3 and posts[0].body == posts[1].body == posts[2].body
    assert answer is not None and len(answer["data"]) == 1


def test_retry_after_is_honoured_but_capped(toolscope, make_client):
    toolscope.queue(429, Retry_After="0.3")
    client = make_client(toolscope.url)

    started = time.monotonic()
    assert client.create_message_tools("m", [item(0)]) is not None

    assert 0.3 <= time.monotonic() - started < 3


def test_retries_back_off_exponentially(toolscope, make_client):
    toolscope.queue(503, times=2)
    client = make_client(toolscope.url, backoff=0.1)

    started = time.monotonic()
    client.create_message_tools("m", [item(0)])

    # Jittered 0.05-0.1 s, then 0.1-0.2 s.
    assert 0.15 <= time.monotonic() - started < 2


def test_a_4xx_is_logged_with_its_field_counted_and_not_retried(toolscope, make_client, caplog):
    details = [{"field": "tools.0.functionName", "message": "Field required"}]
    toolscope.queue(422, {"error": "invalid", "message": "bad", "details": details})
    client = make_client(toolscope.url)

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        assert client.create_message_tools("m", [item(0)]) is None

    assert len(toolscope.api_calls()) == 1
    assert client.rejected == 1 and client.pending == 0
    assert "tools.0.functionName" in caplog.text


@pytest.mark.parametrize(
    "shape",
    [
        # The error document: {"error": {"message", "type", "code", "param", "details"}}.
        lambda details: {
            "error": {
                "message": "bad",
                "type": "invalid_request_error",
                "code": "invalid",
                "param": "calls.0.name",
                "details": details,
            }
        },
        # The flat shape of servers before 0.2.
        lambda details: {"error": "invalid", "message": "bad", "details": details},
    ],
)
def test_raise_errors_raises_the_refusal_with_its_details(toolscope, make_client, shape):
    details = [{"field": "calls.0.name", "message": "Field required"}]
    toolscope.queue(422, shape(details))
    client = make_client(toolscope.url, raise_errors=True)

    with pytest.raises(ToolscopeRequestError) as caught:
        client.record_round("chat", "a1", 0, [{"id": "x"}])

    assert caught.value.status == 422 and caught.value.error == "invalid"
    assert caught.value.details == details
    assert str(caught.value).endswith("-> 422: bad")


def test_raise_errors_raises_unavailable_and_buffers_nothing(down_url, make_client):
    client = make_client(down_url, raise_errors=True, retries=1)

    with pytest.raises(ToolscopeUnavailable, match="messages/tools"):
        client.create_message_tools("m", [item(0)])

    assert client.pending == 0


def test_raise_errors_can_be_turned_on_later(down_url, make_client):
    client = make_client(down_url, retries=0)
    assert client.get_conversation("chat") is None

    client.raise_errors = True

    with pytest.raises(ToolscopeUnavailable):
        client.get_conversation("chat")


def test_down_buffers_logs_once_and_delivers_in_order(down_url, make_client, caplog):
    port = int(down_url.rsplit(":", 1)[1])
    client = make_client(down_url, retries=2, probe_interval=60)

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        started = time.monotonic()
        answers = [client.create_message_tools(f"m{n}", [item(n)]) for n in range(5)]
        answers.append(client.record_round("chat", "a1", 0, [], status="completed"))
        elapsed = time.monotonic() - started

    assert answers == [None] * 6
    assert client.pending == 6 and client.dropped == 0
    assert warnings(caplog, "unreachable") == 1
    assert elapsed < 2  # later writes went straight to the buffer

    with FakeToolscope(port) as back:
        assert client.flush() is True
        assert client.create_message_tools("m-late", [item(9)]) is not None

    posts = back.api_calls("POST")
    assert [p.body.get("messageId") for p in posts] == [
        "m0", "m1", "m2", "m3", "m4", None, "m-late"
    ]
    assert client.pending == 0
    assert warnings(caplog, "reachable again") == 1


def test_the_next_write_after_an_outage_sends_the_backlog_first(down_url, make_client):
    port = int(down_url.rsplit(":", 1)[1])
    client = make_client(down_url, retries=0, probe_interval=0)
    client.create_message_tools("early", [item(0)])

    with FakeToolscope(port) as back:
        answer = client.create_message_tools("late", [item(1)])

    assert answer is not None and client.pending == 0
    assert [p.body["messageId"] for p in back.api_calls("POST")] == ["early", "late"]


def test_a_full_buffer_drops_the_oldest_and_warns_once(down_url, make_client, caplog):
    client = make_client(down_url, retries=0, buffer_size=2)

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        for n in range(5):
            client.create_message_tools(f"m{n}", [item(n)])

    assert client.pending == 2 and client.dropped == 3
    assert warnings(caplog, "buffer full") == 1


def test_the_buffer_is_bounded_in_bytes_too(down_url, make_client):
    client = make_client(down_url, retries=0, buffer_bytes=400)

    for n in range(5):
        client.create_message_tools(f"m{n}", [item(n)])

    assert 0 < client.pending < 5 and client.dropped == 5 - client.pending


def test_a_refusal_while_flushing_is_dropped_and_the_rest_delivered(down_url, make_client):
    port = int(down_url.rsplit(":", 1)[1])
    client = make_client(down_url, retries=0)
    for n in range(3):
        client.create_message_tools(f"m{n}", [item(n)])

    with FakeToolscope(port) as back:
        back.queue(409, {"error": "conflict", "message": "differs"})
        assert client.flush() is True

    assert client.rejected == 1 and len(back.api_calls()) == 3


def test_a_read_while_down_is_empty_not_buffered(down_url, make_client, caplog):
    client = make_client(down_url, retries=0)

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        assert client.get_message_tools(["m1"]) == {"object": "list", "data": [], "has_more": False}
        assert client.get_conversation("chat") is None

    assert client.pending == 0
    assert warnings(caplog, "read") == 2


def test_a_bug_or_bad_argument_never_raises_into_the_agent(toolscope, make_client, caplog):
    client = make_client(toolscope.url)

    with caplog.at_level(logging.ERROR, logger="toolscope.client"):
        assert client.put_conversation("chat", tools=[{"description": "no name"}]) is None
        assert client.record_messages("chat", None) is None  # type: ignore[arg-type]
        assert client.get_message_tools(None)["data"] == []  # type: ignore[arg-type]

    assert warnings(caplog, "error ignored") == 3


def test_one_client_is_shared_by_threads(toolscope, make_client):
    client = make_client(toolscope.url)

    with ThreadPoolExecutor(6) as pool:
        answers = list(
            pool.map(lambda n: client.create_message_tools(f"m{n}", [item(n)]), range(30))
        )

    assert all(answer is not None for answer in answers)
    assert len(toolscope.api_calls("POST")) == 30
    assert toolscope.meta_requests() == 1


def test_close_delivers_the_buffer(down_url, make_client):
    port = int(down_url.rsplit(":", 1)[1])
    client = make_client(down_url, retries=0)
    client.create_message_tools("m", [item(0)])

    with FakeToolscope(port) as back, client:
        pass

    assert client.pending == 0 and len(back.api_calls("POST")) == 1
