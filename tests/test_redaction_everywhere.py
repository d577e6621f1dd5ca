"""A project's mask rules reach every place a producer puts content, not only tool calls: one
secret is sent in each of them, over OTLP (protobuf and JSON, spans and log records) and the
native API, and then looked for in the database's own bytes: the SQLite file with its WAL, and
a `pg_dump` of the PostgreSQL database (docs/otlp-mapping.md, 'Redaction before storage').
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_support import native_call, raw_rows

from tests.otlp_support import (
    hex_id,
    logs_json,
    logs_protobuf,
    make_log,
    make_span,
    text,
    traces_json,
    traces_protobuf,
)
from tests.stored_bytes import database_bytes
from webapp.ingest.otlp.records import LogRecord, Span

# Found by the `api_key` detector (an OpenAI-shaped key): the only rule is `mask: [api_key]`.
SECRET = "sk-proj-CanaryToolscope0123456789abcdef"
# A URL's password: found only as one (`https://bob:<password>@host`).
URL_PASSWORD = "Canary-Url-Passw0rd"
T = 1_760_000_000_000_000_000
RESOURCE = {
    "service.name": "agent",
    "process.command_line": f"python agent.py --api-key {SECRET}",
}


@pytest.fixture
def masked(client, project_key):
    body = {"name": "keys", "kind": "mask", "value": ["api_key"]}
    response = client.post("/api/v1/redaction-rules", json=body, headers=project_key.headers)
    assert response.status_code == 201


def _messages(*messages: dict[str, Any]) -> str:
    return json.dumps(list(messages))


# Content keys the normalizer reads nothing from: not stored at all.
NOT_STORED = {"all messages", "final result", "prompt attribute", "completion attribute"}
# The places a text with the secret was put, by the label it starts with.
PLACES: set[str] = set()


def _said(what: str) -> str:
    PLACES.add(what)
    return f"{what}: my key is {SECRET}"


def _spans(trace: int) -> list[Span]:
    """A run in the shapes of every producer, the secret in each place it puts content."""
    call = {"type": "tool_call", "id": f"c{trace}", "name": "lookup", "arguments": {"k": SECRET}}
    exception = {
        "name": "exception",
        "time_ns": T + 5,
        "attributes": {
            "exception.type": "ValueError",
            "exception.message": _said("exception message"),
            "exception.stacktrace": f"Traceback:\n  lookup(key='{SECRET}')\nValueError",
        },
    }
    http_url = f"https://bob:{URL_PASSWORD}@api.example.com/v1/chat?token={SECRET}"
    spans = [
        make_span(
            trace,
            1,
            f"invoke_agent {SECRET}",
            T,
            T + 100,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.conversation.id": f"conv-{trace}",
                "gen_ai.input.messages": _messages(text("user", _said("agent input"))),
                "gen_ai.system_instructions": _said("system instructions"),
                "pydantic_ai.all_messages": _messages(text("user", _said("all messages"))),
                "final_result": _said("final result"),
                "logfire.msg": _said("logfire message"),
            },
        ),
        # semconv parts (openai-v2, pydantic-ai): text, a call and, next round, its result
        make_span(
            trace,
            2,
            "chat gpt-4o-mini",
            T + 1,
            T + 10,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": _messages(
                    text("system", _said("system prompt")), text("user", _said("user prompt"))
                ),
                "gen_ai.output.messages": _messages(
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": _said("aside")}, call],
                    }
                ),
            },
            parent=1,
        ),
        make_span(
            trace,
            3,
            "chat gpt-4o-mini",
            T + 20,
            T + 30,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": _messages(
                    text("user", _said("user prompt")),
                    {"role": "assistant", "parts": [call]},
                    {
                        "role": "tool",
                        "parts": [
                            {"type": "tool_call_response", "id": f"c{trace}", "response": SECRET}
                        ],
                    },
                ),
                "gen_ai.output.messages": _messages(text("assistant", _said("final answer"))),
            },
            parent=1,
        ),
        # pydantic-ai's instrumentation version 2: tool_arguments / tool_response, and a failed
        # tool with its exception event and status message
        make_span(
            trace,
            4,
            "running tool",
            T + 11,
            T + 19,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "gen_ai.tool.call.id": f"c{trace}",
                "tool_arguments": json.dumps({"k": SECRET}),
                "tool_response": _said("tool response"),
                "logfire.msg": "running tool: lookup",
            },
            parent=1,
        ),
        make_span(
            trace,
            5,
            "running tool",
            T + 12,
            T + 13,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "lookup",
                "tool_arguments": json.dumps({"k": SECRET}),
                "error.type": "ValueError",
            },
            parent=1,
            status=2,
            events=[exception],
        ),
        # semconv tool attributes; OpenLLMetry's traceloop entity input and output
        make_span(
            trace,
            6,
            "execute_tool fetch",
            T + 14,
            T + 15,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fetch",
                "gen_ai.tool.call.arguments": json.dumps({"k": SECRET}),
                "gen_ai.tool.call.result": _said("semconv result"),
            },
            parent=1,
        ),
        make_span(
            trace,
            7,
            "fetch.tool",
            T + 16,
            T + 17,
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.input": json.dumps({"kwargs": {"k": SECRET}}),
                "traceloop.entity.output": _said("traceloop output"),
            },
            parent=1,
        ),
        # OpenLLMetry 0.47's flattened prompt and completion
        make_span(
            trace,
            8,
            "openai.chat",
            T + 40,
            T + 41,
            {
                "llm.request.type": "chat",
                "gen_ai.prompt.0.role": "user",
                "gen_ai.prompt.0.content": _said("flattened prompt"),
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.content": _said("flattened completion"),
                "gen_ai.prompt": _said("prompt attribute"),
                "gen_ai.completion": _said("completion attribute"),
            },
        ),
        # OpenInference: flattened messages, the whole request and response
        make_span(
            trace,
            9,
            "ChatCompletion",
            T + 42,
            T + 43,
            {
                "openinference.span.kind": "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": _said("openinference input"),
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": _said("openinference output"),
                "input.value": json.dumps({"messages": [{"role": "user", "content": SECRET}]}),
                "output.value": json.dumps({"choices": [{"message": {"content": SECRET}}]}),
            },
        ),
        # semconv up to 1.26: content in span events
        make_span(
            trace,
            10,
            "chat",
            T + 44,
            T + 45,
            {"gen_ai.operation.name": "chat"},
            events=[
                {
                    "name": "gen_ai.content.prompt",
                    "time_ns": T + 44,
                    "attributes": {
                        "gen_ai.prompt": json.dumps([{"role": "user", "content": SECRET}])
                    },
                },
                {
                    "name": "gen_ai.content.completion",
                    "time_ns": T + 45,
                    "attributes": {
                        "gen_ai.completion": json.dumps([{"role": "assistant", "content": SECRET}])
                    },
                },
            ],
        ),
        # An OpenInference agent's plain-text input
        make_span(
            trace,
            11,
            "agent",
            T + 46,
            T + 47,
            {"openinference.span.kind": "AGENT", "input.value": _said("agent text input")},
        ),
        # HTTP: headers, URLs with credentials, a span name holding the key, an error
        make_span(
            trace,
            12,
            f"POST /v1/chat?key={SECRET}",
            T + 2,
            T + 9,
            {
                "http.request.method": "POST",
                "http.request.header.authorization": [f"Bearer {SECRET}"],
                "http.request.header.x-api-key": [SECRET],
                "http.response.header.set-cookie": [f"session={SECRET}"],
                "url.full": http_url,
                "http.url": http_url,
                "url.query": f"api_key={SECRET}",
                "db.statement": f"SELECT * FROM keys WHERE key = '{SECRET}'",
            },
            parent=2,
            kind=3,
            status=2,
            events=[exception],
        ),
    ]
    for span in spans:
        span.resource.attributes.update(RESOURCE)
        span.status_message = _said("status message") if span.status_code == 2 else ""
        span.links = [
            {"trace_id": hex_id(99, 32), "span_id": hex_id(9, 16), "attributes": {"why": SECRET}}
        ]
    return spans


def _logs(trace: int) -> list[LogRecord]:
    records = [
        make_log(trace, 2, "gen_ai.user.message", T + 1, {"content": _said("user event")}),
        make_log(trace, 2, "gen_ai.user.message", T + 1, _said("plain body")),
        make_log(trace, 2, "gen_ai.system.message", T + 1, {"content": _said("system event")}),
        make_log(trace, 3, "gen_ai.tool.message", T + 20, {"id": f"c{trace}", "content": SECRET}),
        make_log(
            trace,
            2,
            "gen_ai.choice",
            T + 10,
            {"index": 0, "message": {"content": _said("choice")}},
            {"gen_ai.response.id": "r1", "user.note": _said("log attribute")},
        ),
        make_log(
            trace,
            3,
            "gen_ai.client.inference.operation.details",
            T + 30,
            None,
            {
                "gen_ai.input.messages": [text("user", _said("operation details"))],
                "gen_ai.output.messages": [text("assistant", _said("operation output"))],
                "gen_ai.system_instructions": _said("operation system"),
            },
        ),
    ]
    for record in records:
        record.resource.attributes.update(RESOURCE)
    return records


# --- Sending and reading the database's bytes -------------------------------------------------


def _export(client, key, signal: str, body: bytes, content_type: str) -> None:
    response = client.post(
        f"/v1/{signal}",
        data=body,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {key.key}"},
    )
    assert response.status_code == 200, response.data


def _native_writes(client, headers) -> None:
    base = "/api/v1/conversations/native-1"
    put = {
        "title": _said("title"),
        "system_prompt": _said("system prompt"),
        "metadata": {"note": _said("metadata"), "api_key": SECRET},
    }
    assert client.put(base, json=put, headers=headers).status_code in (200, 201)
    call = native_call(
        0, 0, name="lookup", arguments={"k": SECRET}, response=_said("native result")
    )
    turn = {
        "user": {"id": "u1", "content": _said("native user prompt")},
        "assistant": {
            "id": "a1",
            "content": _said("native answer"),
            "rounds": [
                {
                    "usage": {
                        "input_tokens": 3,
                        "content": _said("round text"),
                        "reasoning": _said("round reasoning"),
                    },
                    "calls": [{k: v for k, v in call.items() if k != "round_index"}],
                }
            ],
        },
    }
    response = client.post(f"{base}/turns", json=turn, headers=headers)
    assert response.status_code == 201, response.data
    messages = {
        "messages": [
            {"id": "u2", "role": "user", "content": _said("posted user message")},
            {"id": "s2", "role": "system", "content": _said("posted system message")},
        ]
    }
    assert client.post(f"{base}/messages", json=messages, headers=headers).status_code == 201
    imported = {
        "format": "openai-chat",
        "messages": [
            {"role": "system", "content": _said("imported system")},
            {"role": "user", "content": _said("imported user")},
            {"role": "assistant", "content": _said("imported answer")},
        ],
    }
    response = client.post("/api/v1/conversations/native-2/import", json=imported, headers=headers)
    assert response.status_code == 201, response.data


def test_one_secret_in_every_place_reaches_neither_database_file(app, client, project_key, masked):
    _export(client, project_key, "traces", traces_protobuf(_spans(1)), "application/x-protobuf")
    _export(client, project_key, "logs", logs_protobuf(_logs(1)), "application/x-protobuf")
    _export(client, project_key, "traces", traces_json(_spans(2)), "application/json")
    _export(client, project_key, "logs", logs_json(_logs(2)), "application/json")
    _native_writes(client, project_key.headers)

    # What was sent was stored: raw spans and logs, the projected conversations, the native ones.
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_span") == [(24,)]
    assert raw_rows(app, "SELECT COUNT(*) FROM otel_log") == [(12,)]
    users = [c for (c,) in raw_rows(app, "SELECT content FROM message WHERE role = 'user'")]
    assert "user prompt: my key is [REDACTED:api_key]" in users
    assert "native user prompt: my key is [REDACTED:api_key]" in users

    stored = database_bytes(app)
    assert SECRET.encode() not in stored
    assert URL_PASSWORD.encode() not in stored
    # Each place's text was stored, masked: none was left out to keep the secret away.
    missing = [
        place
        for place in sorted(PLACES - NOT_STORED)
        if f"{place}: my key is [REDACTED:api_key]".encode() not in stored
    ]
    assert missing == []
    for masked_text in (
        "--api-key [REDACTED:api_key]",  # a resource attribute
        "Bearer [REDACTED:api_key]",  # an HTTP header
        "bob:[REDACTED:api_key]@api.example.com/v1/chat?token=[REDACTED:api_key]",  # a URL
        "POST /v1/chat?key=[REDACTED:api_key]",  # a span name
        "lookup(key='[REDACTED:api_key]')",  # an exception's stack trace
    ):
        assert masked_text.encode() in stored, masked_text
