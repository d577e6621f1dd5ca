"""The projection on plain records: turns, rounds, calls, messages and conversations, and
its guarantees: order, duplication and batching do not change the result."""

from __future__ import annotations

import json
from dataclasses import asdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.otlp_support import (
    FINAL,
    PROMPT,
    SYSTEM,
    agent_run,
    calls_message,
    make_log,
    make_span,
    results_message,
    text,
)
from webapp.ingest.otlp.genai_logs import normalize_log
from webapp.ingest.otlp.normalize import normalize_span
from webapp.ingest.otlp.projection import CONTENT_NOT_CAPTURED, Options, project


def _project(spans, logs=(), options=None):
    keys = options.conversation_keys if options else ()
    records = [normalize_span(s, conversation_keys=keys) for s in spans]
    log_records = [normalize_log(r, i) for i, r in enumerate(logs)]
    return project(records, log_records, options)


def _calls(turn):
    return [
        [(c.external_id, c.function_name, c.arguments, c.response) for c in r.calls]
        for r in turn.rounds
    ]


def _expected_calls(run):
    return [[(i, n, a, res) for i, n, a, res in calls] for calls in run.rounds]


def test_agent_run_becomes_one_turn_with_rounds_calls_results_and_usage():
    run = agent_run(1, rounds=3, parallel=2, conversation="conv-1")
    (conversation,) = _project(run.spans)
    assert conversation.external_id == "conv-1"
    assert conversation.metadata == {
        "source": "otlp",
        "otel.service.name": "agent",
        "otel.agent.name": "weather_agent",
    }
    assert conversation.system_prompt == SYSTEM
    (turn,) = conversation.turns
    assert (turn.user_content, turn.assistant_content, turn.status) == (PROMPT, FINAL, "completed")
    assert _calls(turn) == _expected_calls(run)
    # Usage from the LLM spans only; the agent span's 999 is a total.
    assert [r.usage.input_tokens for r in turn.rounds] == [100, 101, 102]
    # Parallel calls started in reverse order: the sequence is the response's order.
    first = turn.rounds[0].calls
    assert [c.sequence_index for c in first] == [0, 1]
    assert first[0].started_ns > first[1].started_ns
    assert turn.user_id.endswith("-u") and turn.assistant_id.endswith("-a")


def test_bare_per_call_traces_are_stitched_by_tool_call_ids():
    run = agent_run(2, rounds=3, agent=False, per_call_traces=True, tool_spans=False)
    (conversation,) = _project(run.spans)
    assert conversation.external_id == f"otel-{200:032x}"
    (turn,) = conversation.turns
    assert _calls(turn) == _expected_calls(run)
    assert turn.status == "completed"


def test_bare_traces_without_call_ids_are_stitched_by_name_and_arguments():
    run = agent_run(3, rounds=2, agent=False, per_call_traces=True, tool_spans=False, ids=False)
    (conversation,) = _project(run.spans)
    (turn,) = conversation.turns
    assert _calls(turn) == _expected_calls(run)


def test_two_runs_with_different_prompts_do_not_stitch():
    a = agent_run(4, rounds=2, agent=False, per_call_traces=True, tool_spans=False, ids=False)
    b = agent_run(
        5,
        rounds=2,
        agent=False,
        per_call_traces=True,
        tool_spans=False,
        ids=False,
        prompt="Something else?",
        start=a.spans[-1].end_ns,
    )
    # Same calls (same names and arguments): only the differing user prompt keeps them apart.
    for span in b.spans:
        span.attributes = json.loads(json.dumps(span.attributes).replace("result 5/", "result 4/"))
    conversations = _project(a.spans + b.spans)
    assert [len(c.turns) for c in conversations] == [1, 1]


def test_content_off_keeps_rounds_usage_and_calls_marked_not_captured():
    run = agent_run(6, rounds=2, parallel=2, content=False)
    (conversation,) = _project(run.spans)
    (turn,) = conversation.turns
    assert turn.user_content is None and turn.assistant_content is None
    assert turn.status == "completed"  # the agent span arrived without error
    assert not turn.content_captured
    calls = turn.rounds[0].calls
    # Without content the order is the execution spans' start order.
    assert [c.function_name for c in calls] == ["tool_1", "tool_0"]
    assert all(c.arguments is None and c.response is None for c in calls)
    assert all(c.redactions == [CONTENT_NOT_CAPTURED] for c in calls)
    assert [r.usage.output_tokens for r in turn.rounds] == [10, 11]


def test_content_off_without_agent_span_groups_by_parent_and_stays_in_progress():
    run = agent_run(7, rounds=2, content=False, agent=False)
    (conversation,) = _project(run.spans[:1])  # round 0 only, asking for tools
    (turn,) = conversation.turns
    assert turn.status == "in_progress"
    (conversation,) = _project(run.spans)
    (turn,) = conversation.turns
    assert len(turn.rounds) == 2 and turn.status == "completed"


def test_round_zero_alone_is_in_progress_with_calls_and_no_results():
    run = agent_run(8, rounds=2, agent=False)
    llm0 = run.spans[0]
    (conversation,) = _project([llm0])
    (turn,) = conversation.turns
    assert turn.status == "in_progress"
    assert [c.response for c in turn.rounds[0].calls] == [None, None]


def test_later_round_alone_makes_synthetic_rounds_until_the_earlier_span_arrives():
    run = agent_run(9, rounds=3, agent=False, tool_spans=False)
    last = run.spans[-1]
    (conversation,) = _project([last])
    (turn,) = conversation.turns
    assert [r.span_id is None for r in turn.rounds] == [True, True, False]
    assert _calls(turn) == _expected_calls(run)
    assert turn.rounds[0].usage is None
    full = _project(run.spans)[0].turns[0]
    assert [r.span_id is None for r in full.rounds] == [False, False, False]
    assert _calls(full) == _calls(turn)
    assert full.assistant_id != turn.assistant_id  # ids follow the earliest real span


def test_retried_attempt_is_not_a_round():
    run = agent_run(10, rounds=2)
    first = run.spans[0]
    failed = make_span(
        10,
        9999,
        "chat gpt-4o-mini",
        first.start_ns - 500,
        first.start_ns - 100,
        {"gen_ai.operation.name": "chat"},
        parent=10 * 1000 + 1,
        status=2,
    )
    (conversation,) = _project([failed, *run.spans])
    assert len(conversation.turns[0].rounds) == 2


def test_failed_run():
    run = agent_run(11, rounds=2)
    run.spans[-2].status_code = 2  # the last LLM span errored
    run.spans[-2].attributes.pop("gen_ai.output.messages")
    (conversation,) = _project(run.spans)
    assert conversation.turns[0].status == "failed"


def test_conversation_id_only_on_the_llm_spans_or_only_on_the_root():
    run = agent_run(12, rounds=2)
    for span in run.spans:
        if span.attributes.get("gen_ai.operation.name") == "chat":
            span.attributes["session.id"] = "sess"
    assert _project(run.spans)[0].external_id == "sess"
    root = make_span(12, 77, "request", 0, 10**20, {"session.id": "from-root"})
    run = agent_run(12, rounds=2)
    run.spans[-1].parent_span_id = f"{77:016x}"
    assert _project([root, *run.spans])[0].external_id == "from-root"


def test_unusable_conversation_ids_are_hashed_and_kept_in_metadata():
    run = agent_run(13, rounds=2, conversation="a/b")
    (conversation,) = _project(run.spans)
    assert conversation.external_id.startswith("otel-conv-")
    assert conversation.metadata["otel.conversation.id"] == "a/b"


def test_configured_conversation_keys_come_first():
    run = agent_run(14, rounds=2, conversation="semconv")
    run.spans[0].attributes["app.thread"] = "mine"
    options = Options(conversation_keys=("app.thread",))
    assert _project(run.spans, options=options)[0].external_id == "mine"


def test_two_runs_with_one_conversation_id_make_one_conversation_of_two_turns():
    a = agent_run(15, conversation="c")
    b = agent_run(16, conversation="c", start=a.spans[-1].end_ns + 10)
    (conversation,) = _project(a.spans + b.spans)
    assert len(conversation.turns) == 2
    assert conversation.created_ns == a.spans[-1].start_ns


def test_pydantic_v5_results_in_a_user_message_and_one_tool_message_with_two_results():
    for role in ("user", "tool"):
        history = [
            text("user", PROMPT),
            calls_message([("c1", "f", {}), ("c2", "g", {})]),
            results_message([("c1", "r1"), ("c2", "r2")], role=role),
        ]
        llm0 = make_span(
            20,
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
        llm1 = make_span(
            21,
            2,
            "chat",
            30,
            40,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps([text("assistant", "done")]),
            },
        )
        (conversation,) = _project([llm0, llm1])
        (turn,) = conversation.turns
        assert turn.user_content == PROMPT
        assert _calls(turn) == [[("c1", "f", {}, "r1"), ("c2", "g", {}, "r2")], []]


def test_content_only_in_legacy_log_events_node_shape():
    # Spans carry no content; the log records of each span do (Node's instrumentation).
    llm0 = make_span(30, 1, "chat", 10, 20, {"gen_ai.operation.name": "chat"})
    llm1 = make_span(31, 2, "chat", 30, 40, {"gen_ai.operation.name": "chat"})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    logs = [
        make_log(30, 1, "gen_ai.system.message", 10, {"content": SYSTEM}),
        make_log(30, 1, "gen_ai.user.message", 10, {"content": PROMPT}),
        make_log(
            30,
            1,
            "gen_ai.choice",
            20,
            {"index": 0, "finish_reason": "tool_calls", "message": {"tool_calls": [call]}},
        ),
        make_log(31, 2, "gen_ai.system.message", 30, {"content": SYSTEM}),
        make_log(31, 2, "gen_ai.user.message", 30, {"content": PROMPT}),
        make_log(31, 2, "gen_ai.assistant.message", 30, {"tool_calls": [call]}),
        make_log(31, 2, "gen_ai.tool.message", 30, {"id": "c1", "content": '{"x":1}'}),
        make_log(
            31,
            2,
            "gen_ai.choice",
            40,
            {"index": 0, "finish_reason": "stop", "message": {"content": "ok"}},
        ),
    ]
    (conversation,) = _project([llm0, llm1], logs)
    (turn,) = conversation.turns
    assert conversation.system_prompt == SYSTEM
    assert (turn.user_content, turn.assistant_content) == (PROMPT, "ok")
    assert _calls(turn) == [[("c1", "f", {"a": 1}, '{"x":1}')], []]


def test_span_content_wins_over_the_same_content_in_log_records():
    # Quirk 13: util-genai and Agent Framework send both; nothing is doubled.
    run = agent_run(32, rounds=2)
    llm0 = run.spans[0]
    logs = [
        make_log(
            32,
            int(llm0.span_id, 16),
            "gen_ai.client.inference.operation.details",
            1,
            None,
            {"gen_ai.input.messages": [text("user", "other")]},
        )
    ]
    (conversation,) = _project(run.spans, logs)
    assert conversation.turns[0].user_content == PROMPT
    assert _calls(conversation.turns[0]) == _expected_calls(run)


def test_execution_span_errors_become_error_results():
    run = agent_run(33, rounds=2, parallel=1)
    tool = next(s for s in run.spans if s.name.startswith("execute_tool"))
    tool.status_code, tool.status_message = 2, "tool crashed"
    del tool.attributes["gen_ai.tool.call.result"]
    llm1 = run.spans[2]
    history = json.loads(llm1.attributes["gen_ai.input.messages"])
    llm1.attributes["gen_ai.input.messages"] = json.dumps(history[:-1])
    (conversation,) = _project(run.spans)
    (call,) = conversation.turns[0].rounds[0].calls
    assert (call.is_error, call.response) == (True, "tool crashed")


# --- Properties: order, duplicates and batching do not matter ---------------------------------


_runs = st.lists(
    st.fixed_dictionaries(
        {
            "rounds": st.integers(1, 3),
            "parallel": st.integers(1, 3),
            "agent": st.booleans(),
            "content": st.booleans(),
            "ids": st.booleans(),
            "per_call_traces": st.booleans(),
            "conversation": st.sampled_from([None, "shared", "other"]),
            "overlap": st.booleans(),
        }
    ),
    min_size=1,
    max_size=3,
)


def _scenario(runs):
    spans, logs = [], []
    start = 1_760_000_000_000_000_000
    for n, params in enumerate(runs):
        if params["per_call_traces"]:
            params = {**params, "agent": False}
        run = agent_run(n + 1, start=start, **params)
        spans += run.spans
        logs += run.logs
        start = max(s.end_ns for s in run.spans) + 1_000
    return spans, logs


def _state(spans, logs=()):
    return json.dumps([asdict(c) for c in _project(spans, logs)], sort_keys=True, default=str)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_runs, st.randoms(use_true_random=False))
def test_order_and_duplicates_do_not_change_the_projection(runs, random):
    spans, logs = _scenario(runs)
    expected = _state(spans, logs)
    shuffled = list(spans) + random.sample(spans, k=min(3, len(spans)))
    random.shuffle(shuffled)
    # Duplicates are removed by the store's key; the projection sees each span once.
    unique = list({(s.trace_id, s.span_id): s for s in shuffled}.values())
    assert _state(unique, logs) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_runs, st.randoms(use_true_random=False))
def test_batches_arriving_in_any_order_end_in_the_same_state(runs, random):
    spans, logs = _scenario(runs)
    expected = _state(spans, logs)
    order = list(spans)
    random.shuffle(order)
    arrived = []
    cut = random.randint(1, len(order))
    for batch in (order[:cut], order[cut:]):
        arrived += batch
        interim = _state(arrived, logs)  # the interim state is a projection of what arrived
        assert interim == _state(list(reversed(arrived)), logs)
    assert _state(arrived, logs) == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_runs)
def test_every_stored_call_has_a_unique_round_and_sequence(runs):
    spans, logs = _scenario(runs)
    ids = set()
    for conversation in _project(spans, logs):
        for turn in conversation.turns:
            assert turn.assistant_id not in ids
            ids.add(turn.assistant_id)
            assert [r.index for r in turn.rounds] == list(range(len(turn.rounds)))
            for r in turn.rounds:
                assert [c.sequence_index for c in r.calls] == sorted(
                    {c.sequence_index for c in r.calls}
                )


def test_the_otlp_core_imports_no_web_framework_nor_database():
    """Readers, normalization, redaction and the projection are pure: testable on plain data."""
    import ast
    from pathlib import Path

    import webapp.ingest.otlp as package

    pure = ("records", "protobuf_reader", "json_reader", "messages", "normalize", "redact",
            "links", "batch", "projection")  # fmt: skip
    forbidden = {"flask", "sqlalchemy", "werkzeug", "psycopg", "jinja2"}
    for name in pure:
        tree = ast.parse((Path(package.__file__).parent / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = {(node.module or "").split(".")[0]} if node.level == 0 else set()
                if node.level >= 2:  # outside the package: only pure modules
                    assert node.module in ("redaction", "replay.jsonfast"), (name, node.module)
            else:
                continue
            assert not roots & forbidden, (name, roots)
