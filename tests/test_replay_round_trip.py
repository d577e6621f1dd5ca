"""Export → import → export, in the pure core: a replay's payload, read back by the importer and
stored as the import API stores it, replays to the same payload, and keeps doing so (issue 12).

``imported_history`` mirrors what ``POST /conversations/{cid}/import`` stores (see
``webapp.api.conversations``): one row per imported message, marked imported, a microsecond
apart and before the moment of the import, assistant runs completed, each call answered at its
message's time. ``tests/test_replay_api.py`` runs the same round trip through the database.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings

from webapp.ingest.importers import import_conversation
from webapp.replay import (
    FORMATS,
    History,
    Message,
    ReplayOptions,
    ToolCall,
    ToolDefinition,
    replay,
    validate,
)

try:  # tests/ is on sys.path when pytest imports test modules by path
    from replay_strategies import (
        assistant,
        at,
        call,
        histories,
        history,
        options,
        sources,
        user,
    )
except ImportError:  # pragma: no cover - tests/ is a package
    from tests.replay_strategies import (
        assistant,
        at,
        call,
        histories,
        history,
        options,
        sources,
        user,
    )

# The number of generated histories the documented guarantee is measured on (docs/replay.md):
# every one of them, in the format and with the options drawn for it.
ROUND_TRIP_EXAMPLES = 300

IMPORTED_AT = at(100_000)


def import_body(payload: dict[str, Any], fmt: str) -> dict[str, Any]:
    """The import API's arguments for an export's payload (``format`` + the payload)."""
    if fmt == "openai-responses":
        return {"messages": payload.get("input"), "system": payload.get("instructions")}
    return {"messages": payload.get("messages"), "system": payload.get("system")}


def imported_history(
    payload: dict[str, Any], fmt: str, *, conversation_id: str, moment: datetime = IMPORTED_AT
) -> History:
    """``payload`` as the import API stores it, then loads it for a replay."""
    body = import_body(payload, fmt)
    imported = import_conversation(
        fmt,
        messages=body["messages"],
        system=body["system"],
        tools=payload.get("tools"),
        id_prefix=f"imp-{conversation_id}",
    )
    count = len(imported.messages)
    messages = []
    row = 0
    for n, m in enumerate(imported.messages):
        created_at = moment - timedelta(microseconds=count - n)
        row += 1
        message_row = row
        calls = []
        for c in m.tool_calls:
            row += 1
            calls.append(
                ToolCall(
                    row_id=row,
                    external_id=c.id,
                    function_name=c.name,
                    arguments=c.arguments,
                    round_index=c.round_index,
                    sequence_index=c.sequence_index,
                    created_at=created_at,
                    response=c.response,
                    response_created_at=created_at if c.response is not None else None,
                    is_error=c.is_error,
                )
            )
        messages.append(
            Message(
                row_id=message_row,
                external_id=m.id,
                role=m.role,  # type: ignore[arg-type]
                content=m.content,
                created_at=created_at,
                status="completed" if m.role == "assistant" else None,
                tool_calls=tuple(calls),
                imported=True,
            )
        )
    tools = tuple(
        ToolDefinition(t["name"], t["description"], t["parameters"]) for t in imported.tools
    )
    return History(conversation_id, None, imported.system_prompt, tools, tuple(messages))


def round_trip(payload: dict[str, Any], o: ReplayOptions, conversation_id: str):
    """Import ``payload`` and replay the copy with the same options, as of now (the import)."""
    copy = imported_history(payload, o.format, conversation_id=conversation_id)
    return replay(copy, replace(o, as_of=None))


def without_message_ids(result) -> list[tuple[Any, ...]]:
    return [(d.kind, d.round_index, d.call_id, json.dumps(d.detail)) for d in result.diagnostics]


ROUND_TRIP_SETTINGS = settings(
    max_examples=ROUND_TRIP_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@ROUND_TRIP_SETTINGS
@given(histories(), options())
def test_export_import_export_is_identical_and_stays_so(h: History, o: ReplayOptions) -> None:
    first = replay(h, o)
    second = round_trip(first.payload, o, "copy-1")
    assert second.payload == first.payload
    # The copy's replay leaves nothing out and changes nothing: what remains are notes on the
    # rendering (Anthropic merging the messages it merged the first time) and the budget's
    # verdict when even the first replay could not fit.
    assert {d.kind for d in second.diagnostics} <= {
        "message_merged",
        "over_budget",
        "empty_payload",
    }
    assert validate(second.payload, o.format) == validate(first.payload, o.format)
    third = round_trip(second.payload, o, "copy-2")
    assert third.payload == second.payload
    assert without_message_ids(third) == without_message_ids(second)
    assert third.stats == second.stats


# --- The cases of issue 12 -------------------------------------------------------------------


def test_a_run_whose_last_round_has_no_result_keeps_its_first_round_in_every_format() -> None:
    """Round 0 answered, round 1 not, no final text, then a new question: the export holds
    round 0 (a later round was requested, so its results were sent on); so does the copy's."""
    h = history(
        user(1, "q1", 0),
        assistant(
            2,
            None,
            1,
            (call(3, "c1", t=2, response="r1"), call(4, "c2", round=1, t=4, response=None)),
        ),
        user(5, "q2", 10),
    )
    for fmt in FORMATS:
        o = ReplayOptions(format=fmt)
        first = replay(h, o)
        assert "c1" in json.dumps(first.payload)
        copy = imported_history(first.payload, fmt, conversation_id="copy")
        (run,) = [m for m in copy.messages if m.role == "assistant"]
        assert [c.external_id for c in run.tool_calls] == ["c1"] and run.content is None
        second = replay(copy, o)
        assert second.payload == first.payload, fmt
        assert [d.kind for d in second.diagnostics if d.kind != "message_merged"] == []


def test_anthropic_text_beside_tool_use_survives_and_keeps_its_sources() -> None:
    """Anthropic merges one run's answer with the next run's tool_use into one assistant
    message; the import keeps the text, so the copy does not compact the cited source away."""
    h = history(
        user(1, "Find the refund policy", 0),
        assistant(2, "Found it [source1].", 1, (call(3, "c1", t=2, response=sources(1, 2)),)),
        assistant(4, "Checked.", 10, (call(5, "c3", name="lookup", t=11, response="done"),)),
        user(6, "Thanks", 20),
    )
    o = ReplayOptions(format="anthropic")
    first = replay(h, o)
    merged = first.payload["messages"][3]
    assert [b["type"] for b in merged["content"]] == ["text", "tool_use"]
    copy = imported_history(first.payload, "anthropic", conversation_id="copy")
    answers = [m.content for m in copy.messages if m.role == "assistant"]
    assert answers == ["Found it [source1].", "Checked."]
    second = replay(copy, o)
    assert second.payload == first.payload
    result = second.payload["messages"][2]["content"][0]["content"]
    assert [s["source_number"] for s in json.loads(result)] == [1]


def test_a_copy_is_never_stale_trimmed_or_compacted_again() -> None:
    """Whatever the window and the options, the copy of an export replays as that export."""
    h = history(
        user(1, "q", 0),
        assistant(2, None, 1, (call(3, "c1", t=2, response=sources(1, 2)),), status="failed"),
    )
    o = ReplayOptions(freshness_seconds=None, persistence="per-service-call", trim_trailing=False)
    first = replay(h, o)
    copy = imported_history(first.payload, "openai-chat", conversation_id="copy")
    days_later = IMPORTED_AT + timedelta(days=3)
    strict = ReplayOptions(as_of=days_later, freshness_seconds=60, compact_sources=True)
    assert replay(copy, strict).payload == first.payload
