"""Exports checked against the official SDKs' request types (openai, anthropic).

The SDK param types are TypedDicts; pydantic validates them through a TypeAdapter. Two things
make the check strict enough to fail on a wrong shape:

* ``Iterable[...]`` fields (tool_calls, content blocks) are validated lazily by pydantic, so
  the validated value is walked to force every item through its validator;
* TypedDicts silently ignore unknown keys, so the walked value must equal the input — a key the
  SDK does not know (a misspelling, a field in the wrong place) makes them differ.

Deliberately broken payloads below prove the check is not vacuous.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from anthropic.types import MessageParam, ToolParam
from hypothesis import HealthCheck, given, settings
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import FunctionToolParam, ResponseInputParam
from pydantic import TypeAdapter, ValidationError

from webapp.replay import FORMATS, History, ReplayOptions, replay

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import SEARCH_TOOL, assistant, call, histories, history, options, user
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import (
        SEARCH_TOOL,
        assistant,
        call,
        histories,
        history,
        options,
        user,
    )

ADAPTERS: dict[str, dict[str, TypeAdapter[Any]]] = {
    "openai-chat": {
        "messages": TypeAdapter(list[ChatCompletionMessageParam]),
        "tools": TypeAdapter(list[ChatCompletionToolParam]),
    },
    "openai-responses": {
        "input": TypeAdapter(ResponseInputParam),
        "tools": TypeAdapter(list[FunctionToolParam]),
    },
    "anthropic": {
        "messages": TypeAdapter(list[MessageParam]),
        "tools": TypeAdapter(list[ToolParam]),
    },
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


def check_against_sdk(payload: dict[str, Any], fmt: str) -> None:
    """Raise if any part of ``payload`` does not match the SDK types exactly."""
    for key, adapter in ADAPTERS[fmt].items():
        if key not in payload:
            continue
        validated = materialize(adapter.validate_python(payload[key]))
        if validated != payload[key]:
            raise AssertionError(
                f"{fmt} {key}: keys or values the SDK does not know: {payload[key]}"
            )
    allowed = {"openai-chat": {"messages", "tools"}}.get(fmt)
    if fmt == "openai-responses":
        allowed = {"instructions", "input", "tools"}
        assert isinstance(payload.get("instructions", ""), str)
    elif fmt == "anthropic":
        allowed = {"system", "messages", "tools"}
        assert isinstance(payload.get("system", ""), str)
    assert set(payload) <= (allowed or set())


def rich_history() -> History:
    return history(
        user(1, "Onboard TechCorp", 0),
        assistant(
            2,
            "Done [source1].",
            1,
            (
                call(3, "", args={"name": "TechCorp"}, seq=0, t=2),
                call(4, "tc_02", args=None, seq=1, t=2, response="", is_error=True),
                call(5, "tc_03", round=1, t=4, response='[{"source_number": 1}]'),
            ),
        ),
        user(6, "Thanks", 10),
        system="Be helpful.",
        tools=(SEARCH_TOOL,),
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_replay_export_matches_the_sdk_types(fmt: str) -> None:
    payload = replay(rich_history(), ReplayOptions(format=fmt, freshness_seconds=None)).payload
    assert "tools" in payload
    check_against_sdk(payload, fmt)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), options())
def test_every_replay_matches_the_sdk_types(h: History, o: ReplayOptions) -> None:
    check_against_sdk(replay(h, o).payload, o.format)


BROKEN: list[tuple[str, dict[str, Any]]] = [
    # arguments must be a JSON string, not an object
    (
        "openai-chat",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "s", "arguments": {}}}
                    ],
                }
            ]
        },
    ),
    # a tool message needs tool_call_id
    ("openai-chat", {"messages": [{"role": "tool", "content": "ok"}]}),
    # an unknown key is not silently accepted
    ("openai-chat", {"messages": [{"role": "user", "content": "hi", "tool_call_id": "a"}]}),
    # Responses: a function_call needs a call_id
    (
        "openai-responses",
        {"input": [{"type": "function_call", "name": "s", "arguments": "{}"}]},
    ),
    # Responses: function tools need parameters and strict
    ("openai-responses", {"input": [], "tools": [{"type": "function", "name": "s"}]}),
    # Anthropic: tool_use input must be an object
    (
        "anthropic",
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a", "name": "s", "input": "{}"}],
                }
            ]
        },
    ),
    # Anthropic: a tool_result needs tool_use_id
    (
        "anthropic",
        {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
    ),
    # Anthropic: OpenAI-style tool message is not a message
    ("anthropic", {"messages": [{"role": "tool", "tool_call_id": "a", "content": "x"}]}),
    # Anthropic: tools use input_schema, not parameters
    ("anthropic", {"messages": [], "tools": [{"name": "s", "parameters": {"type": "object"}}]}),
]


@pytest.mark.parametrize(("fmt", "payload"), BROKEN)
def test_sdk_check_rejects_broken_payloads(fmt: str, payload: dict[str, Any]) -> None:
    with pytest.raises((ValidationError, AssertionError)):
        check_against_sdk(payload, fmt)
