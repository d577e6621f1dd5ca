"""Redaction before storage: the project's rules reach every place a tool argument or
result sits in OTLP data, and a redacted secret is nowhere in the rows to store."""

from __future__ import annotations

import json
from dataclasses import asdict

from tests.otlp_support import agent_run, calls_message, make_log, make_span, results_message, text
from webapp.ingest.otlp.batch import prepare_logs, prepare_spans
from webapp.ingest.otlp.normalize import normalize_span
from webapp.ingest.otlp.projection import project
from webapp.ingest.otlp.records import Decoded
from webapp.redaction import Rule, compile_rules

SECRET = "alice@example.com"


def _rows_text(batch) -> str:
    return json.dumps([asdict(r) for r in batch.spans + batch.logs], default=str)


def _secret_run():
    history = [
        text("user", "mail alice"),
        calls_message([("c1", "send_mail", {"to": SECRET}), ("c2", "lookup", {"q": SECRET})]),
        results_message([("c1", f"sent to {SECRET}"), ("c2", f"found {SECRET}")]),
    ]
    llm0 = make_span(
        1,
        1,
        "chat",
        10,
        20,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(history[:1]),
            "gen_ai.output.messages": json.dumps(history[1:2]),
        },
    )
    tool = make_span(
        1,
        2,
        "execute_tool send_mail",
        21,
        22,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "send_mail",
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": json.dumps({"to": SECRET}),
            "gen_ai.tool.call.result": f"sent to {SECRET}",
        },
    )
    llm1 = make_span(
        1,
        3,
        "chat",
        30,
        40,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([text("assistant", "done")]),
        },
    )
    return [llm0, tool, llm1]


def test_mask_rules_reach_calls_results_and_execution_spans():
    rules = compile_rules((Rule("pii", "mask", ("email",)),))
    batch = prepare_spans(Decoded(spans=_secret_run()), rules)
    assert SECRET not in _rows_text(batch)
    (conversation,) = project([r.record for r in batch.spans])
    calls = conversation.turns[0].rounds[0].calls
    assert calls[0].arguments == {"to": "[REDACTED:email]"}
    assert calls[0].response == "sent to [REDACTED:email]"
    assert calls[0].redactions == ["pii"]


def test_rules_for_one_tool_apply_to_its_results_found_by_call_id():
    rules = compile_rules((Rule("mail", "mask", ("email",), "send_mail"),))
    batch = prepare_spans(Decoded(spans=_secret_run()), rules)
    (conversation,) = project([r.record for r in batch.spans])
    mail, lookup = conversation.turns[0].rounds[0].calls
    assert mail.response == "sent to [REDACTED:email]"
    assert lookup.response == f"found {SECRET}"  # another tool: untouched


def test_a_skipped_tool_is_not_stored_anywhere():
    rules = compile_rules((Rule("no-mail", "skip", (), "send_mail"),))
    batch = prepare_spans(Decoded(spans=_secret_run()), rules)
    text_rows = _rows_text(batch)
    assert f"sent to {SECRET}" not in text_rows
    (conversation,) = project([r.record for r in batch.spans])
    assert [c.function_name for c in conversation.turns[0].rounds[0].calls] == ["lookup"]


def test_results_of_unknown_tools_get_only_rules_without_a_tool_name():
    rules = compile_rules(
        (Rule("general", "mask", ("email",)), Rule("named", "redact_paths", ("x",), "*"))
    )
    log = make_log(
        1, 9, "gen_ai.tool.message", 5, {"id": "zz", "content": json.dumps({"x": SECRET})}
    )
    batch = prepare_logs(Decoded(logs=[log]), rules)
    (part,) = batch.logs[0].record["message"]["parts"]
    assert part["response"] == '{"x":"[REDACTED:email]"}'
    assert part["redactions"] == ["general"]


def test_unreadable_content_is_stored_through_mask_rules():
    rules = compile_rules((Rule("pii", "mask", ("email",)),))
    span = make_span(
        1,
        1,
        "chat",
        1,
        2,
        {"gen_ai.operation.name": "chat", "gen_ai.input.messages": f"oops {SECRET}"},
    )
    batch = prepare_spans(Decoded(spans=[span]), rules)
    assert batch.spans[0].attributes["gen_ai.input.messages"] == "oops [REDACTED:email]"


def test_without_rules_the_record_is_the_plain_normalization():
    run = agent_run(1)
    batch = prepare_spans(Decoded(spans=run.spans), compile_rules(()))
    assert [r.record for r in batch.spans] == [normalize_span(s) for s in run.spans]


def test_the_same_span_twice_in_a_request_keeps_the_first_and_warns_when_different():
    run = agent_run(1)
    changed = make_span(1, 1010, "chat", 1, 2, {"gen_ai.operation.name": "chat"})
    batch = prepare_spans(Decoded(spans=[*run.spans, run.spans[0], changed]), compile_rules(()))
    assert len(batch.spans) == len(run.spans)
    assert len(batch.warnings) == 1


def test_identical_log_records_of_one_span_stay_apart_by_ordinal():
    # Node stamps in milliseconds: two identical records are two records.
    logs = [make_log(1, 1, "gen_ai.user.message", 5, {"content": "hi"}) for _ in range(2)]
    batch = prepare_logs(Decoded(logs=logs), compile_rules(()))
    assert len({r.fingerprint for r in batch.logs}) == 2
    again = prepare_logs(Decoded(logs=logs), compile_rules(()))
    assert [r.fingerprint for r in again.logs] == [r.fingerprint for r in batch.logs]


def test_other_log_records_are_counted_and_dropped():
    logs = [make_log(1, 1, "", 5, "plain log line"), make_log(1, 1, "app.event", 5, None)]
    batch = prepare_logs(Decoded(logs=logs), compile_rules(()))
    assert (batch.logs, batch.dropped_logs) == ([], 2)


def _legacy_tool_span(span_id: int, name: str, arguments: str, response: str):
    """pydantic-ai's instrumentation version 2: `tool_arguments` and `tool_response`."""
    return make_span(
        7,
        span_id,
        "running tool",
        10,
        20,
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": f"call-{span_id}",
            "tool_arguments": arguments,
            "tool_response": response,
        },
    )


def test_rules_of_a_tool_reach_pydantic_ais_legacy_tool_attributes():
    rules = compile_rules(
        (
            Rule("crm-mails", "mask", ("email",), function_name="send_*"),
            Rule("no-debug", "skip", function_name="debug_*"),
        )
    )
    spans = [
        _legacy_tool_span(1, "send_mail", json.dumps({"to": SECRET}), f"sent to {SECRET}"),
        _legacy_tool_span(2, "debug_dump", json.dumps({"env": SECRET}), SECRET),
    ]
    batch = prepare_spans(Decoded(spans=spans), rules)
    assert SECRET not in _rows_text(batch)
    sent, debug = (row.record["tool"] for row in batch.spans)
    assert sent["arguments"] == {"to": "[REDACTED:email]"}
    assert sent["result"] == "sent to [REDACTED:email]"
    assert sent["redactions"] == ["crm-mails"]
    assert debug["skipped"] == "no-debug" and debug["arguments"] is None
    assert all("tool_arguments" not in row.attributes for row in batch.spans)


def test_mask_rules_reach_text_names_attributes_events_links_and_resources():
    key = "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2"
    rules = compile_rules(
        (
            Rule("keys", "mask", ("api_key",)),
            Rule("lookup-mails", "mask", ("email",), function_name="lookup"),
        )
    )
    exception = {
        "name": "exception",
        "time_ns": 15,
        "attributes": {"exception.message": f"bad key {key} for {SECRET}"},
    }
    llm = make_span(
        1,
        1,
        f"chat {key}",
        10,
        20,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [text("system", f"use {key}"), text("user", f"my key is {key}")]
            ),
            "gen_ai.output.messages": json.dumps([text("assistant", f"got {key}")]),
            "http.request.header.authorization": [f"Bearer {key}"],
        },
        status=2,
        events=[exception],
    )
    llm.status_message = f"refused {key}"
    llm.links = [{"trace_id": "ab" * 16, "span_id": "cd" * 8, "attributes": {"why": key}}]
    llm.resource.attributes["process.command_line"] = f"agent --key {key}"
    tool = make_span(
        1,
        2,
        "execute_tool lookup",
        21,
        22,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
        status=2,
        events=[exception],
    )
    batch = prepare_spans(Decoded(spans=[llm, tool]), rules)
    assert key not in _rows_text(batch)
    row, tool_row = batch.spans
    record = row.record
    assert record["input"][1]["parts"][0]["content"] == "my key is [REDACTED:api_key]"
    assert record["output"][0]["parts"][0]["content"] == "got [REDACTED:api_key]"
    assert record["name"] == row.name == "chat [REDACTED:api_key]"
    assert row.status_message == "refused [REDACTED:api_key]"
    assert row.attributes["http.request.header.authorization"] == ["Bearer [REDACTED:api_key]"]
    assert row.events[0]["attributes"]["exception.message"] == (
        f"bad key [REDACTED:api_key] for {SECRET}"  # the email rule names a tool
    )
    assert row.links[0]["attributes"] == {"why": "[REDACTED:api_key]"}
    assert row.links[0]["trace_id"] == "ab" * 16
    assert row.resource["process.command_line"] == "agent --key [REDACTED:api_key]"
    # the tool's span: its tool's rules too
    assert tool_row.events[0]["attributes"]["exception.message"] == (
        "bad key [REDACTED:api_key] for [REDACTED:email]"
    )


def test_mask_rules_reach_log_bodies_and_attributes():
    key = "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2"
    rules = compile_rules((Rule("keys", "mask", ("api_key",)),))
    logs = [
        make_log(1, 1, "gen_ai.user.message", 5, f"my key is {key}", {"note": key}),
        make_log(1, 1, "gen_ai.choice", 6, {"index": 0, "message": {"content": key}}),
    ]
    batch = prepare_logs(Decoded(logs=logs), rules)
    assert key not in _rows_text(batch)
    user, choice = batch.logs
    assert user.record["message"]["parts"][0]["content"] == "my key is [REDACTED:api_key]"
    assert user.attributes == {"note": "[REDACTED:api_key]"}
    assert choice.record["message"]["parts"][0]["content"] == "[REDACTED:api_key]"
