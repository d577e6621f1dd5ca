"""`normalize_span_row` reads a span's message lists once for its record and its raw attributes:
it must give what `normalize_span` and `raw_attributes` give apart, whatever the span holds."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.otlp_support import make_span
from webapp.ingest.otlp.normalize import normalize_span, normalize_span_row, raw_attributes

_MESSAGES = json.dumps(
    [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
        {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "f"}]},
    ]
)
_message_values = st.sampled_from(
    [
        _MESSAGES,
        "[]",
        "not json",
        "[NaN]",
        '{"role": "user"}',  # JSON, not a list
        '[{"role": "user", "content": "chat shape"}]',
        '["not a message"]',
        "[" * 300 + "]" * 300,
        '[{"role": "user", "parts": [{"type": "text", "content": "\\ud800"}]}]',
    ]
)
_attributes = st.fixed_dictionaries(
    {},
    optional={
        "gen_ai.operation.name": st.sampled_from(["chat", "invoke_agent", "execute_tool", "x"]),
        "gen_ai.input.messages": st.one_of(_message_values, st.integers()),
        "gen_ai.output.messages": _message_values,
        "gen_ai.prompt.0.content": st.just("flattened"),
        "gen_ai.prompt.0.role": st.just("user"),
        "llm.output_messages.0.message.content": st.just("openinference"),
        "input.value": _message_values,
        "other": st.text(max_size=5),
    },
)


def _mask(text: str) -> str:
    return f"masked:{text}"


@settings(max_examples=150, deadline=None)
@given(_attributes, st.sampled_from([2 * 1024 * 1024, 40]))
def test_same_as_apart(attributes: dict[str, Any], limit: int) -> None:
    span = make_span(1, 2, "span", 10, 20, attributes)
    record, raw = normalize_span_row(span, _mask, limit)
    assert record == normalize_span(span, limit)
    assert raw == raw_attributes(attributes, _mask, limit)


def test_an_unreadable_message_list_stays_raw_masked() -> None:
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "not json"}
    attributes["gen_ai.output.messages"] = _MESSAGES
    record, raw = normalize_span_row(make_span(1, 2, "chat", 10, 20, attributes), _mask)
    assert raw == {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "masked:not json"}
    assert "input" not in record and record["output"][0]["role"] == "user"
