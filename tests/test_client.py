"""The Python client (toolscope-client, client/) against a real server over HTTP, on both
databases. Its own tests, without Flask, are in client/tests (see test_client_package.py).

What an agent relies on: big batches are split within the limits the server announces and all
stored, retries never duplicate anything, 4xx are not retried, and a Toolscope that is down
never raises into the agent's loop (payloads wait in a bounded buffer and are delivered later).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from openai import OpenAI
from openai.types.chat import ChatCompletion
from sqlalchemy import func, select
from toolscope_client import (
    ToolscopeClient,
    ToolscopeRequestError,
    ToolscopeUnavailable,
    calls_from_openai,
    usage_from_openai,
)
from werkzeug.serving import make_server

from webapp.bench.server import free_port
from webapp.db import db, utcnow
from webapp.models import Message, ServiceCall, ToolInvocation


@contextlib.contextmanager
def serve(wsgi_app: Any, port: int = 0) -> Iterator[str]:
    """A threaded HTTP server for `wsgi_app` on a loopback port."""
    server = make_server("127.0.0.1", port, wsgi_app, threaded=True)
    # A short poll interval: shutdown() waits for the loop to notice.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)


META = ("GET", "/api/v1/meta")


class CountingAdapter(requests.adapters.HTTPAdapter):
    """Counts the HTTP attempts the client makes, including ones that never get an answer."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((request.method, request.path_url))
        return super().send(request, *args, **kwargs)

    @property
    def api_calls(self) -> list[tuple[str, str]]:
        """The requests other than the client's one question for the server's limits."""
        return [sent for sent in self.sent if sent != META]


def counting_session() -> tuple[requests.Session, CountingAdapter]:
    session = requests.Session()
    adapter = CountingAdapter()
    session.mount("http://", adapter)
    return session, adapter


class Flaky:
    """WSGI middleware answering the first POSTs with an error; `after_storing` answers the error
    only after the app has handled the request (the answer was lost, the write was not)."""

    def __init__(self, app: Any, failures: int, status: str, after_storing: bool) -> None:
        self.app = app
        self.failures = failures
        self.status = status
        self.after_storing = after_storing
        self.posts = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ["REQUEST_METHOD"] != "POST":
            return self.app(environ, start_response)
        self.posts += 1
        if self.posts > self.failures:
            return self.app(environ, start_response)
        if self.after_storing:
            body = b"".join(self.app(environ, lambda *_args, **_kw: None))
            assert body  # the app did answer; the client never sees it
        start_response(self.status, [("Content-Type", "text/plain")])
        return [b"upstream trouble"]


def tool_items(count: int, *, round_size: int = 10) -> list[dict[str, Any]]:
    return [
        {
            "externalToolCallId": f"call_{n}",
            "functionName": "internal_search",
            "arguments": {"query": f"q{n}"},
            "roundIndex": n // round_size,
            "sequenceIndex": n % round_size,
            "response": {"content": f"result {n}"},
        }
        for n in range(count)
    ]


def stored_calls(app: Any, message_external_id: str | None = None) -> int:
    with app.app_context():
        query = select(func.count()).select_from(ToolInvocation)
        if message_external_id is not None:
            query = query.join(Message, Message.id == ToolInvocation.message_id).where(
                Message.external_id == message_external_id
            )
        return db.session.scalar(query)


def make_client(base_url: str, key: Any, **options: Any) -> ToolscopeClient:
    options.setdefault("backoff", 0.0)
    return ToolscopeClient(base_url, key.key, **options)


# -- batching ----------------------------------------------------------------------------------


def test_120_calls_become_3_requests_and_are_all_stored(app, live_server, project_key):
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)

    answer = client.create_message_tools("msg-120", tool_items(120))

    assert adapter.sent == [META] + [("POST", "/api/v1/messages/tools")] * 3
    assert answer is not None and len(answer["data"]) == 120
    assert answer["object"] == "list" and answer["has_more"] is False
    assert stored_calls(app, "msg-120") == 120
    fetched = client.get_message_tools(["msg-120"])
    keys = {(t["roundIndex"], t["sequenceIndex"]) for t in fetched["data"]}
    assert len(keys) == 120
    assert fetched["data"][0]["response"]["content"].startswith("result ")


def test_posting_the_same_batches_again_stores_nothing_new(app, live_server, project_key):
    client = make_client(live_server, project_key)
    first = client.create_message_tools("msg-again", tool_items(60))
    second = client.create_message_tools("msg-again", tool_items(60))

    assert first is not None and second is not None
    assert sorted(t["id"] for t in first["data"]) == sorted(t["id"] for t in second["data"])
    assert stored_calls(app, "msg-again") == 60


def test_450_message_ids_are_fetched_in_3_gets_and_merged(app, live_server, project_key):
    now = utcnow()
    with app.app_context():
        messages = [
            Message(project_id=project_key.project_id, external_id=f"m{n}", created_at=now)
            for n in range(450)
        ]
        db.session.add_all(messages)
        db.session.flush()
        db.session.add_all(
            ToolInvocation(
                project_id=project_key.project_id,
                message_id=message.id,
                round_index=0,
                sequence_index=0,
                external_tool_call_id=f"call_{message.external_id}",
                function_name="lookup",
                arguments={},
                created_at=now,
            )
            for message in messages
        )
        db.session.commit()
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)

    result = client.get_message_tools([f"m{n}" for n in range(450)])

    assert [method for method, _ in adapter.api_calls] == ["GET", "GET", "GET"]
    assert {t["messageId"] for t in result["data"]} == {f"m{n}" for n in range(450)}
    assert len(result["data"]) == 450


def test_the_limits_are_asked_once_and_reused(live_server, project_key):
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)

    client.create_message_tools("msg-a", tool_items(3))
    client.get_message_tools(["msg-a"])
    client.record_round("chat-a", "a-a", 0, [])

    assert adapter.sent.count(META) == 1
    assert client.limits.max_tools_per_request == 50


@pytest.mark.parametrize(
    "app_config", [{"MAX_TOOLS_PER_REQUEST": 20, "MAX_IDS_PER_REQUEST": 30}]
)
def test_the_client_follows_a_server_with_lower_limits(app, live_server, project_key):
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)

    stored = client.create_message_tools("msg-low", tool_items(50))
    fetched = client.get_message_tools(["msg-low"] + [f"unknown-{n}" for n in range(40)])
    turn = client.record_turn(
        "chat-low",
        user={"id": "u-low", "role": "user", "content": "go"},
        assistant={"id": "a-low", "content": "done"},
        rounds=[{"calls": [{"id": f"c{n}", "name": "search", "arguments": {}}]} for n in range(25)],
    )

    assert stored is not None and fetched["data"] and turn is not None
    assert client.rejected == 0
    message_tools = [m for m, path in adapter.api_calls if path.startswith("/api/v1/messages/")]
    assert message_tools == ["POST"] * 3 + ["GET"] * 2
    assert stored_calls(app, "msg-low") == 50 and stored_calls(app, "a-low") == 25


def test_no_message_ids_means_no_request(live_server, project_key):
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)

    assert client.get_message_tools("") == {"object": "list", "data": [], "has_more": False}
    assert adapter.sent == []


# -- native API ----------------------------------------------------------------------------------


def test_record_turn_stores_rounds_usage_and_responses(app, live_server, project_key):
    client = make_client(live_server, project_key)
    assert client.put_conversation("chat-1", title="Weather", channel="support-bot") is not None

    stored = client.record_turn(
        "chat-1",
        user={"id": "u1", "role": "user", "content": "Weather in Zurich and Berlin?"},
        assistant={
            "id": "a1",
            "role": "assistant",
            "content": "Sunny and rainy.",
            "model": "gpt-4o",
        },
        rounds=[
            {
                "usage": {"model": "gpt-4o", "input_tokens": 120, "output_tokens": 30},
                "calls": [
                    {
                        "id": "c1",
                        "name": "get_weather",
                        "arguments": {"city": "Zurich"},
                        "response": {"content": "sunny"},
                    },
                    {
                        "id": "c2",
                        "name": "get_weather",
                        "arguments": {"city": "Berlin"},
                        "response": {"content": "rain"},
                    },
                ],
            }
        ],
    )

    assert stored is not None
    conversation = client.get_conversation("chat-1")
    assistant = next(m for m in conversation["messages"] if m["id"] == "a1")
    assert [
        (c["round_index"], c["sequence_index"], c["name"]) for c in assistant["tool_calls"]
    ] == [
        (0, 0, "get_weather"),
        (0, 1, "get_weather"),
    ]
    assert assistant["tool_calls"][1]["response"]["content"] == "rain"
    with app.app_context():
        assert db.session.scalar(select(ServiceCall.input_tokens)) == 120


def test_record_round_first_without_then_with_responses(app, live_server, project_key):
    client = make_client(live_server, project_key)
    client.record_messages(
        "chat-2",
        [
            {"id": "u2", "role": "user", "content": "Search please"},
            {"id": "a2", "role": "assistant", "status": "in_progress"},
        ],
    )
    asked = [{"id": "c1", "name": "search", "arguments": {"q": "x"}, "sequence_index": 0}]
    answered = [{**asked[0], "response": {"content": "found"}}]

    assert client.record_round("chat-2", "a2", 0, asked, status="in_progress") is not None
    assert client.record_round("chat-2", "a2", 0, answered, status="completed") is not None

    conversation = client.get_conversation("chat-2")
    assistant = next(m for m in conversation["messages"] if m["id"] == "a2")
    assert assistant["status"] == "completed"
    assert [c["response"]["content"] for c in assistant["tool_calls"]] == ["found"]
    assert stored_calls(app) == 1


def test_a_run_recorded_round_by_round_ends_with_its_final_answer(app, live_server, project_key):
    """Issue 23: a run recorded per service call had no way to carry its final text (the
    message could not change once completed, 409)."""
    client = make_client(live_server, project_key)
    client.record_messages(
        "chat-text",
        [
            {"id": "u-text", "role": "user", "content": "Search please"},
            {"id": "a-text", "role": "assistant", "status": "in_progress"},
        ],
    )
    asked = [{"id": "c1", "name": "search", "arguments": {"q": "x"}, "response": {"content": "A"}}]
    assert client.record_round("chat-text", "a-text", 0, asked) is not None

    answer = client.record_round(
        "chat-text",
        "a-text",
        1,
        [],
        usage={"model": "gpt-4o", "input_tokens": 40, "output_tokens": 5},
        content="Found A.",
        status="completed",
    )

    assert answer is not None
    assert (answer["content"], answer["status"]) == ("Found A.", "completed")
    stored = next(
        m for m in client.get_conversation("chat-text")["messages"] if m["id"] == "a-text"
    )
    assert (stored["content"], stored["status"]) == ("Found A.", "completed")
    # Sent again as it is, the same round changes nothing; another answer is a conflict.
    assert client.record_round("chat-text", "a-text", 1, [], content="Found A.") is not None
    client.raise_errors = True
    with pytest.raises(ToolscopeRequestError) as refused:
        client.record_round("chat-text", "a-text", 1, [], content="Something else.")
    assert refused.value.status == 409


def test_a_round_over_the_limit_answers_the_message_with_every_call(app, live_server, project_key):
    client = make_client(live_server, project_key)
    calls = [{"id": f"c{n}", "name": "search", "arguments": {}} for n in range(60)]

    answer = client.record_round("chat-60", "a-60", 0, calls, status="completed")

    assert answer["object"] == "message" and answer["status"] == "completed"
    assert [c["sequence_index"] for c in answer["tool_calls"]] == list(range(60))
    assert stored_calls(app, "a-60") == 60


def test_a_turn_with_more_calls_than_one_request_takes_is_split(app, live_server, project_key):
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)
    rounds = [
        {"calls": [{"id": f"c{r}_{s}", "name": "search", "arguments": {}} for s in range(30)]}
        for r in range(3)
    ]

    stored = client.record_turn(
        "chat-big",
        user={"id": "u-big", "role": "user", "content": "go"},
        assistant={"id": "a-big", "role": "assistant", "content": "done"},
        rounds=rounds,
    )

    assert stored is not None
    assert stored_calls(app, "a-big") == 90
    assert all(method in ("POST", "GET") for method, _ in adapter.api_calls)


# -- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "after_storing"),
    [("503 Service Unavailable", False), ("502 Bad Gateway", True), ("429 Too Many", False)],
)
def test_a_retried_failure_is_stored_once(app, project_key, status, after_storing):
    flaky = Flaky(app, failures=1, status=status, after_storing=after_storing)
    with serve(flaky) as url:
        client = make_client(url, project_key)
        answer = client.create_message_tools("msg-flaky", tool_items(5))

    assert flaky.posts == 2
    assert answer is not None and len(answer["data"]) == 5
    assert stored_calls(app, "msg-flaky") == 5
    assert client.pending == 0


def test_4xx_is_not_retried_nor_buffered(app, live_server, project_key, caplog):
    session, adapter = counting_session()
    client = make_client(live_server, project_key, session=session)
    bad = tool_items(3)
    del bad[2]["functionName"]

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        assert client.create_message_tools("msg-bad", bad) is None

    assert len(adapter.api_calls) == 1
    assert client.pending == 0 and client.rejected == 1
    assert "tools.2.functionName" in caplog.text
    assert stored_calls(app) == 0


def test_raise_errors_raises_the_api_error(live_server, project_key):
    client = make_client(live_server, project_key, raise_errors=True)
    bad = tool_items(1)
    bad[0]["roundIndex"] = -1

    with pytest.raises(ToolscopeRequestError) as caught:
        client.create_message_tools("msg-bad", bad)

    # The MessageTool endpoints answer request errors as 400 (the unique_sdk's convention).
    assert (caught.value.status, caught.value.error) == (400, "invalid")
    assert any(d["field"] == "tools.0.roundIndex" for d in caught.value.details)


def test_raise_errors_when_unreachable_raises_unavailable(project_key):
    client = ToolscopeClient(
        f"http://127.0.0.1:{free_port()}", "k", backoff=0.0, retries=1, raise_errors=True
    )
    with pytest.raises(ToolscopeUnavailable):
        client.create_message_tools("m", tool_items(1))
    assert client.pending == 0


def test_server_down_buffers_and_flushes_when_it_is_back(app, project_key, caplog):
    port = free_port()
    session, adapter = counting_session()
    client = make_client(
        f"http://127.0.0.1:{port}", project_key, session=session, retries=2, probe_interval=60
    )

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        for n in range(4):
            assert client.create_message_tools(f"msg-down-{n}", tool_items(3)) is None
        assert (
            client.record_turn(
                "chat-down",
                user={"id": "u-down", "role": "user", "content": "hi"},
                assistant={"id": "a-down", "role": "assistant", "content": "hello"},
            )
            is None
        )

    assert client.pending == 5 and client.dropped == 0
    # One question for the limits (never retried), then the first write tried 1 + 2 retries;
    # the later ones went straight to the buffer, without asking for the limits again.
    assert adapter.sent.count(META) == 1
    assert len(adapter.api_calls) == 3
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1

    with serve(app, port):
        assert client.flush() is True

    assert client.pending == 0
    assert stored_calls(app) == 12
    with app.app_context():
        assert db.session.scalar(select(func.count()).select_from(Message)) == 6


def test_a_full_buffer_drops_the_oldest_and_counts_them(app, project_key, caplog):
    port = free_port()
    client = make_client(f"http://127.0.0.1:{port}", project_key, buffer_size=2, retries=0)

    with caplog.at_level(logging.WARNING, logger="toolscope.client"):
        for n in range(5):
            client.create_message_tools(f"msg-full-{n}", tool_items(1))

    assert client.pending == 2 and client.dropped == 3
    assert len([r for r in caplog.records if "buffer full" in r.getMessage()]) == 1
    with serve(app, port):
        client.flush()
    assert stored_calls(app, "msg-full-3") == 1 and stored_calls(app, "msg-full-4") == 1
    assert stored_calls(app) == 2


def test_the_next_successful_write_delivers_the_backlog_first(app, project_key):
    port = free_port()
    client = make_client(f"http://127.0.0.1:{port}", project_key, retries=0, probe_interval=0)
    client.create_message_tools("msg-early", tool_items(2))
    assert client.pending == 1

    with serve(app, port):
        answer = client.create_message_tools("msg-late", tool_items(2))

    assert answer is not None and client.pending == 0
    assert stored_calls(app, "msg-early") == 2 and stored_calls(app, "msg-late") == 2


def test_threads_share_one_client(app, live_server, project_key):
    client = make_client(live_server, project_key)
    errors: list[BaseException] = []

    def agent(n: int) -> None:
        try:
            for k in range(3):
                assert client.create_message_tools(f"msg-t{n}-{k}", tool_items(12)) is not None
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert stored_calls(app) == 6 * 3 * 12


# -- OpenAI helpers -------------------------------------------------------------------------------

COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Zurich"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": "{not json"},
                    },
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 210,
        "completion_tokens": 40,
        "total_tokens": 250,
        "prompt_tokens_details": {"cached_tokens": 128},
    },
}


def test_openai_objects_become_calls_that_are_stored(app, live_server, project_key):
    completion = ChatCompletion.model_validate(COMPLETION)
    message = completion.choices[0].message
    results = [{"role": "tool", "tool_call_id": "call_a", "content": "18 °C"}]

    calls = calls_from_openai(message, results)
    usage = usage_from_openai(completion)

    assert calls[0] == {
        "id": "call_a",
        "name": "get_weather",
        "arguments": {"city": "Zurich"},
        "sequence_index": 0,
        "response": {"content": "18 °C", "is_error": False},
    }
    assert calls[1]["arguments"] == {"_raw": "{not json"} and "response" not in calls[1]
    assert usage == {
        "model": "gpt-4o-2024-08-06",
        "provider": "openai",
        "input_tokens": 210,
        "output_tokens": 40,
        "cached_tokens": 128,
    }
    client = make_client(live_server, project_key)
    client.record_messages(
        "chat-oa", [{"id": "a-oa", "role": "assistant", "status": "in_progress"}]
    )
    assert client.record_round("chat-oa", "a-oa", 0, calls, usage=usage) is not None
    assert stored_calls(app, "a-oa") == 2


# -- the OpenAI tool loops of docs/client.md, with the real openai SDK ----------------------------


class FakeChatCompletions:
    """A stand-in for the OpenAI HTTP API: asks for two parallel get_weather calls, then answers
    in text once the results are in the conversation."""

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = json.loads(environ["wsgi.input"].read(length))
        if request["messages"][-1]["role"] == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": "Sunny and rainy."}
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{city}",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": json.dumps({"city": city}),
                        },
                    }
                    for city in ("Zurich", "Berlin")
                ],
            }
        body = {
            **COMPLETION,
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        }
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]


def weather(city: str) -> str:
    return json.dumps({"city": city, "temp": 18})


def test_per_run_openai_loop_from_the_docs(app, live_server, project_key):
    toolscope = make_client(live_server, project_key, raise_errors=True)
    with serve(FakeChatCompletions()) as openai_url:
        llm = OpenAI(base_url=f"{openai_url}/v1", api_key="sk-test", max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
        rounds = []
        while True:
            completion = llm.chat.completions.create(model="gpt-4o", messages=history)
            message = completion.choices[0].message
            rounds.append({"usage": usage_from_openai(completion), "calls": []})
            if not message.tool_calls:
                break
            history.append(message.model_dump(exclude_none=True))
            results = [
                {
                    "role": "tool",
                    "tool_call_id": c.id,
                    "content": weather(**json.loads(c.function.arguments)),
                }
                for c in message.tool_calls
            ]
            history.extend(results)
            rounds[-1]["calls"] = calls_from_openai(message, results)
        toolscope.record_turn(
            "chat-loop",
            user={"id": "u-loop", "role": "user", "content": "Weather?"},
            assistant={"id": "a-loop", "content": message.content, "model": completion.model},
            rounds=rounds,
        )

    conversation = toolscope.get_conversation("chat-loop")
    assistant = next(m for m in conversation["messages"] if m["id"] == "a-loop")
    assert assistant["content"] == "Sunny and rainy."
    assert [
        (c["id"], c["arguments"], c["response"]["content"]) for c in assistant["tool_calls"]
    ] == [
        ("call_Zurich", {"city": "Zurich"}, weather("Zurich")),
        ("call_Berlin", {"city": "Berlin"}, weather("Berlin")),
    ]
    assert len(assistant["usage"]) == 2


def test_per_service_call_openai_loop_from_the_docs(app, live_server, project_key):
    toolscope = make_client(live_server, project_key, raise_errors=True)
    toolscope.record_messages(
        "chat-live",
        [
            {"id": "u-live", "role": "user", "content": "Weather?"},
            {"id": "a-live", "role": "assistant", "status": "in_progress"},
        ],
    )
    with serve(FakeChatCompletions()) as openai_url:
        llm = OpenAI(base_url=f"{openai_url}/v1", api_key="sk-test", max_retries=0)
        history: list[dict[str, Any]] = [{"role": "user", "content": "Weather?"}]
        round_index = 0
        while True:
            completion = llm.chat.completions.create(model="gpt-4o", messages=history)
            message = completion.choices[0].message
            usage = usage_from_openai(completion)
            if not message.tool_calls:
                break
            toolscope.record_round(
                "chat-live", "a-live", round_index, calls_from_openai(message), usage=usage
            )
            asked = toolscope.get_conversation("chat-live")["messages"][1]["tool_calls"]
            assert [c["response"] for c in asked] == [None, None]
            history.append(message.model_dump(exclude_none=True))
            results = [
                {
                    "role": "tool",
                    "tool_call_id": c.id,
                    "content": weather(**json.loads(c.function.arguments)),
                }
                for c in message.tool_calls
            ]
            history.extend(results)
            toolscope.record_round(
                "chat-live", "a-live", round_index, calls_from_openai(message, results)
            )
            round_index += 1
        toolscope.record_round("chat-live", "a-live", round_index, [], usage=usage)
        toolscope.record_messages(
            "chat-live",
            [
                {
                    "id": "a-live",
                    "role": "assistant",
                    "content": message.content,
                    "model": completion.model,
                    "status": "completed",
                }
            ],
        )

    assistant = toolscope.get_conversation("chat-live")["messages"][1]
    assert assistant["status"] == "completed" and assistant["content"] == "Sunny and rainy."
    assert [c["response"]["content"] for c in assistant["tool_calls"]] == [
        weather("Zurich"),
        weather("Berlin"),
    ]
    assert stored_calls(app, "a-live") == 2
