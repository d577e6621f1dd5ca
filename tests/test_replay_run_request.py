"""A run's request (webapp/replay/run_request.py): the body built from a replay is what the
official SDKs accept and send as they are given it, and its key recognises the same request.

The SDK check is the real call: ``client.<...>.create(**body)`` on a client whose transport
is an in-process mock (no socket), so an unknown keyword fails in the SDK's own signature and
the JSON it puts on the wire is compared with the body. The SDKs' request TypedDicts check the
shape of every value besides. The last test runs every pure part of a run in a row: edits,
replay, body, the SDK call, the answer read back and compared with what the agent did.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

from webapp.replay import FORMATS, History, ReplayOptions, replay, validate
from webapp.replay.edits import apply_edits, parse_edits
from webapp.replay.export import resolve_as_of, turn_times
from webapp.replay.next_action import (
    ActionCall,
    NextAction,
    compare,
    parse_answer,
    parse_usage,
    recorded_next_action,
)
from webapp.replay.run_request import (
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    SDK_CALLS,
    TEMPERATURE_FORMATS,
    request_body,
    request_key,
)

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import (
        SEARCH_TOOL,
        assistant,
        at,
        call,
        histories,
        history,
        options,
        user,
    )
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import (
        SEARCH_TOOL,
        assistant,
        at,
        call,
        histories,
        history,
        options,
        user,
    )

PARAMS = {
    "openai-chat": TypeAdapter(CompletionCreateParamsNonStreaming),
    "openai-responses": TypeAdapter(ResponseCreateParamsNonStreaming),
    "anthropic": TypeAdapter(MessageCreateParamsNonStreaming),
}


def materialize(value: Any) -> Any:
    """Walk a validated value, forcing pydantic's lazy iterable validators to run."""
    if isinstance(value, dict):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    if isinstance(value, Iterable):
        return [materialize(v) for v in value]
    return value


def check_params(fmt: str, body: dict[str, Any]) -> None:
    """The SDK's create-params TypedDict takes the body, and knows every key in it (TypedDicts
    drop unknown keys silently, so the validated value must equal the body)."""
    validated = materialize(PARAMS[fmt].validate_python(body))
    assert validated == body


# -- the SDKs, on a transport that never leaves the process ------------------------------------


class Provider:
    """Answers every request with ``answer`` and remembers what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self.answer: dict[str, Any] = {}

    def handle(self, request: Any, module: Any) -> Any:
        self.sent.append((request.url.path, json.loads(request.content)))
        return module.Response(200, json=self.answer)


PROVIDER = Provider()
OPENAI = openai.OpenAI(
    api_key="sk-test",
    base_url="http://127.0.0.1:9/v1",
    max_retries=0,
    http_client=httpx.Client(transport=httpx.MockTransport(lambda r: PROVIDER.handle(r, httpx))),
)
ANTHROPIC = anthropic.Anthropic(
    api_key="sk-ant-test",
    base_url="http://127.0.0.1:9",
    max_retries=0,
    http_client=httpx2.Client(transport=httpx2.MockTransport(lambda r: PROVIDER.handle(r, httpx2))),
)
CREATE = {
    "openai-chat": OPENAI.chat.completions.create,
    "openai-responses": OPENAI.responses.create,
    "anthropic": ANTHROPIC.messages.create,
}
PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-responses": "/v1/responses",
    "anthropic": "/v1/messages",
}
PLAIN_ANSWERS = {
    "openai-chat": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
        ],
    },
    "openai-responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "gpt-test",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}


def send(fmt: str, body: dict[str, Any], answer: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call the SDK with ``body``; return its answer as JSON and check what went on the wire."""
    PROVIDER.sent.clear()
    PROVIDER.answer = answer or PLAIN_ANSWERS[fmt]
    result = CREATE[fmt](**body)
    ((path, sent),) = PROVIDER.sent
    assert path == PATHS[fmt]
    assert sent == json.loads(json.dumps(body))  # sent as given: nothing dropped or changed
    return result.model_dump(mode="json")


# -- the body --------------------------------------------------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    histories(),
    options(),
    st.sampled_from([0.0, 0.7, None]),
    st.sampled_from([None, 1, 512]),
)
def test_every_replay_becomes_a_body_the_sdk_sends_as_it_is(
    h: History, o: ReplayOptions, temperature: float | None, max_tokens: int | None
) -> None:
    for fmt in FORMATS:
        payload = replay(h, replace(o, format=fmt)).payload
        body = request_body(
            fmt, payload, model="test-model", temperature=temperature, max_tokens=max_tokens
        )
        check_params(fmt, body)
        send(fmt, body)


@pytest.mark.parametrize("fmt", FORMATS)
def test_keys_with_nothing_in_them_are_left_out(fmt: str) -> None:
    h = history(user(1, "hi", 0))
    body = request_body(
        fmt, replay(h, ReplayOptions(format=fmt)).payload, model="m", temperature=None
    )
    expected = {"model", "input" if fmt == "openai-responses" else "messages"}
    if fmt == "anthropic":
        expected.add("max_tokens")  # required by Anthropic
        assert body["max_tokens"] == DEFAULT_ANTHROPIC_MAX_TOKENS
    assert set(body) == expected
    send(fmt, body)


@pytest.mark.parametrize(
    ("fmt", "keys"),
    [
        ("openai-chat", {"model", "messages", "tools", "temperature", "max_tokens"}),
        (
            "openai-responses",
            {"model", "instructions", "input", "tools", "temperature", "max_output_tokens"},
        ),
        ("anthropic", {"model", "system", "messages", "tools", "max_tokens"}),
    ],
)
def test_a_full_body_names_each_part_as_its_sdk_does(fmt: str, keys: set[str]) -> None:
    h = history(
        user(1, "Find the refund policy", 0),
        assistant(2, "Here it is.", 1, (call(3, "call_1", t=1),)),
        system="You are helpful.",
        tools=(SEARCH_TOOL,),
    )
    payload = replay(h, ReplayOptions(format=fmt)).payload
    body = request_body(fmt, payload, model="m", temperature=0.2, max_tokens=300)
    assert set(body) == keys
    assert body.get("temperature") == (0.2 if fmt in TEMPERATURE_FORMATS else None)
    assert body["max_output_tokens" if fmt == "openai-responses" else "max_tokens"] == 300
    if fmt == "openai-chat":  # the system prompt is the first message
        assert body["messages"][0] == {"role": "system", "content": "You are helpful."}
    else:
        assert body["instructions" if fmt == "openai-responses" else "system"] == "You are helpful."
    check_params(fmt, body)
    send(fmt, body)


def test_anthropic_is_never_sent_a_temperature() -> None:
    """The SDK sends API version 2026-10-21, which answers 400 to any sampling parameter, and
    its ``messages.create`` has no ``temperature`` (were one added back, this test says so)."""
    assert ANTHROPIC.default_headers["anthropic-version"] >= "2026-10-21"
    assert "temperature" not in inspect.signature(ANTHROPIC.messages.create).parameters
    for temperature in (0.0, 1.0, None):
        body = request_body("anthropic", {"messages": []}, model="m", temperature=temperature)
        assert "temperature" not in body
    assert "temperature" in inspect.signature(OPENAI.chat.completions.create).parameters
    assert "temperature" in inspect.signature(OPENAI.responses.create).parameters


def test_the_body_is_a_copy_of_the_payload() -> None:
    h = history(
        user(1, "hi", 0), assistant(2, "ok", 1, (call(3, "c1", t=1),)), tools=(SEARCH_TOOL,)
    )
    payload = replay(h, ReplayOptions()).payload
    before = copy.deepcopy(payload)
    body = request_body("openai-chat", payload, model="m")
    body["messages"][1]["tool_calls"][0]["function"]["name"] = "changed"
    body["tools"][0]["function"]["parameters"]["properties"].clear()
    assert payload == before
    assert SEARCH_TOOL.parameters is not None and SEARCH_TOOL.parameters["properties"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("gemini", {"messages": []}, "m"), "format must be one of"),
        (("openai-chat", {"messages": []}, ""), "a model is required"),
        (("openai-responses", {"messages": []}, "m"), "list under 'input'"),
        (("anthropic", {"input": []}, "m"), "list under 'messages'"),
    ],
)
def test_a_body_that_cannot_be_built_says_why(args: tuple[Any, ...], says: str) -> None:
    fmt, payload, model = args
    with pytest.raises(ValueError, match=says):
        request_body(fmt, payload, model=model)
    with pytest.raises(ValueError, match="at least 1"):
        request_body("anthropic", {"messages": []}, model="m", max_tokens=0)


def test_each_format_names_its_sdk_call() -> None:
    assert set(SDK_CALLS) == set(FORMATS)
    for fmt, path in SDK_CALLS.items():
        target: Any = {"openai-chat": OPENAI, "openai-responses": OPENAI}.get(fmt, ANTHROPIC)
        for part in path.split(".")[1:]:
            target = getattr(target, part)
        assert target == CREATE[fmt]


# -- the key ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)
bodies = st.dictionaries(st.text(max_size=6), json_values, min_size=1, max_size=5)


def reorder(value: Any) -> Any:
    """The same JSON with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reorder(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reorder(v) for v in value]
    return value


@settings(max_examples=150, deadline=None)
@given(bodies, st.integers(1, 10**6))
def test_the_key_is_the_same_for_the_same_request_in_any_key_order(
    body: dict[str, Any], connection: int
) -> None:
    key = request_key(connection, body)
    assert len(key) == 64 and int(key, 16) >= 0
    assert request_key(connection, reorder(body)) == key
    assert request_key(connection, json.loads(json.dumps(body))) == key
    assert request_key(connection + 1, body) != key


@settings(max_examples=150, deadline=None)
@given(bodies, bodies)
def test_different_requests_have_different_keys(a: dict[str, Any], b: dict[str, Any]) -> None:
    canonical = {json.dumps(x, sort_keys=True) for x in (a, b)}
    assert (request_key(1, a) == request_key(1, b)) == (len(canonical) == 1)


def test_the_key_is_the_sha256_of_the_canonical_json() -> None:
    body = {"model": "m", "temperature": 0.0, "messages": [{"role": "user", "content": "é"}]}
    text = (
        '{"body":{"messages":[{"content":"é","role":"user"}],"model":"m","temperature":0.0},'
        '"connection":7}'
    )
    assert request_key(7, body) == hashlib.sha256(text.encode()).hexdigest()
    # The settings that change the answer change the key.
    for change in ({"model": "n"}, {"temperature": 0.5}, {"max_tokens": 10}):
        assert request_key(7, {**body, **change}) != request_key(7, body)
    with pytest.raises(ValueError):
        request_key(7, {"temperature": float("nan")})


# -- every pure part of a run, in a row --------------------------------------------------------

ANSWERS = {
    "openai-chat": {
        **PLAIN_ANSWERS["openai-chat"],
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "lookup_order", "arguments": '{"id": 42}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
    },
    "openai-responses": {
        **PLAIN_ANSWERS["openai-responses"],
        "output": [
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_9",
                "name": "lookup_order",
                "arguments": '{"id": 42}',
                "status": "completed",
            }
        ],
        "usage": {
            "input_tokens": 50,
            "output_tokens": 9,
            "total_tokens": 59,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    },
    "anthropic": {
        **PLAIN_ANSWERS["anthropic"],
        "content": [
            {"type": "text", "text": "Checking again."},
            {"type": "tool_use", "id": "toolu_9", "name": "lookup_order", "input": {"id": 42}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 50, "output_tokens": 9},
    },
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_fork_from_edits_to_the_comparison(fmt: str) -> None:
    h = history(
        user(1, "Where is order 42?", 0),
        assistant(
            2,
            "It ships tomorrow.",
            1,
            (
                call(
                    3,
                    "c1",
                    name="lookup_order",
                    args={"id": 42},
                    t=2,
                    response='{"status": "packed"}',
                ),
            ),
        ),
        user(4, "And order 43?", 10),
        assistant(
            5, "Also tomorrow.", 11, (call(6, "c2", name="lookup_order", args={"id": 43}, t=12),)
        ),
    )
    as_of = resolve_as_of("turn:2", now=at(100), turn_times=turn_times(h))
    edits = parse_edits([{"type": "fail_call", "call_id": "c1", "message": "timeout"}])
    edited = apply_edits(h, edits, as_of=as_of)
    payload = replay(edited, ReplayOptions(as_of=as_of, format=fmt, freshness_seconds=None)).payload
    assert validate(payload, fmt) == []
    body = request_body(fmt, payload, model="test-model")
    answer = send(fmt, body, ANSWERS[fmt])
    replayed = parse_answer(fmt, answer)
    assert replayed.calls[0].name == "lookup_order" and replayed.calls[0].arguments == {"id": 42}
    assert parse_usage(fmt, answer).output_tokens == 9
    recorded = recorded_next_action(h, as_of)
    assert recorded == NextAction("calls", (ActionCall("lookup_order", {"id": 43}, "c2"),))
    result = compare(replayed, recorded)
    assert result.category == "same_tools_other_arguments"
    assert result.to_json()["argument_diffs"][0]["changes"] == [
        {"path": "/id", "recorded": 43, "replayed": 42}
    ]
    # The same request again is recognised; a fresh one with another edit is not.
    again = request_body(fmt, payload, model="test-model")
    assert request_key(1, again) == request_key(1, body)
    other = apply_edits(h, parse_edits([{"type": "drop_call", "call_id": "c1"}]), as_of=as_of)
    other_body = request_body(
        fmt,
        replay(other, ReplayOptions(as_of=as_of, format=fmt, freshness_seconds=None)).payload,
        model="test-model",
    )
    assert request_key(1, other_body) != request_key(1, body)
