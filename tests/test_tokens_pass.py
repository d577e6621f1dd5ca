"""The token pass: writes store calls uncounted, the pass counts each one exactly once, and
its pending work (the NULL counts) survives a crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from api_support import raw_rows, tool_item
from sqlalchemy import text

from webapp.cli import main
from webapp.db import db
from webapp.ingest.token_pass import (
    _SET_COUNTS,
    MESSAGES,
    Arrivals,
    TokenPass,
    count_batch,
    count_pending,
    pending_messages,
    pending_rows,
)
from webapp.replay.jsonfast import dumps
from webapp.settings import load
from webapp.tokens import estimate

TOOLS_URL = "/api/v1/messages/tools"
ROOT = Path(__file__).resolve().parent.parent


def post_tools(client, key, message_id: str, tools: list[dict]) -> None:
    response = client.post(
        TOOLS_URL, json={"messageId": message_id, "tools": tools}, headers=key.headers
    )
    assert response.status_code == 201, response.get_data(as_text=True)


def post_many(client, key, messages: int, calls: int = 10) -> None:
    for m in range(messages):
        tools = [
            tool_item(0, s, arguments={"q": f"question {m}.{s}"}, response=f"answer {m}.{s} " * s)
            for s in range(calls)
        ]
        post_tools(client, key, f"m{m}", tools)


def stored_counts(app) -> list[tuple]:
    return raw_rows(
        app,
        "SELECT id, arguments_tokens, response_tokens, token_method FROM tool_invocation "
        "ORDER BY id",
    )


def expected_counts(app) -> list[tuple]:
    """What ingestion used to count inline: the compact arguments and the response."""
    with app.app_context():
        from webapp.models import ToolInvocation

        rows = db.session.query(ToolInvocation).order_by(ToolInvocation.id).all()
        return [
            (
                r.id,
                estimate(dumps(r.arguments)).tokens,
                None if r.response is None else estimate(r.response).tokens,
                "tiktoken:o200k_base",
            )
            for r in rows
        ]


def pending(app) -> int:
    with app.app_context():
        return pending_rows()


def test_writes_leave_the_counts_to_the_pass_which_counts_each_call_once(app, client, project_key):
    post_many(client, project_key, 3)
    assert pending(app) == 30
    assert {c[1:] for c in stored_counts(app)} == {(None, None, None)}
    with app.app_context():
        assert count_pending(limit=7) == 30  # several batches
        assert count_pending() == 0  # nothing is counted twice
    assert pending(app) == 0
    assert stored_counts(app) == expected_counts(app)


def test_a_count_already_stored_is_never_overwritten(app, client, project_key):
    """Two passes that read the same rows: the first to write wins, the second changes
    nothing (COALESCE), so a count is written once whatever the race."""
    post_tools(client, project_key, "m1", [tool_item(0, 0, response="hello")])
    with app.app_context():
        assert count_pending() == 1
        (row_id,) = [r[0] for r in stored_counts(app)]
        late = {
            "b_id": row_id,
            "b_arguments": 999,
            "b_response": 999,
            "b_method": "late",
            "b_stamp": 1,
        }
        db.session.execute(_SET_COUNTS, [late], execution_options={"synchronize_session": False})
        db.session.commit()
    assert stored_counts(app) == expected_counts(app)


def test_a_response_that_comes_later_is_counted_then(app, client, project_key):
    post_tools(client, project_key, "m1", [tool_item(0, 0)])  # no response yet
    with app.app_context():
        assert count_pending() == 1
    ((_, arguments_tokens, response_tokens, _),) = stored_counts(app)
    assert arguments_tokens > 0 and response_tokens is None
    assert pending(app) == 0
    post_tools(client, project_key, "m1", [tool_item(0, 0, response="it rains")])
    assert pending(app) == 1
    with app.app_context():
        assert count_pending() == 1
    assert stored_counts(app) == expected_counts(app)
    assert pending(app) == 0


def test_a_pass_killed_midway_leaves_the_rest_pending_for_the_next(app, client, project_key):
    """A process dies after two batches of ten (SIGKILL, no cleanup): the 20 rows it wrote stay
    counted, the other 30 are still pending and a new pass counts exactly those."""
    post_many(client, project_key, 5)
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from conftest import make_test_app
        from webapp.ingest.token_pass import count_batch
        app = make_test_app({app.config["DATABASE_URL"]!r})
        with app.app_context():
            after = 0
            for _ in range(2):
                counted, after = count_batch(after, 10)
                assert counted == 10
            os.kill(os.getpid(), signal.SIGKILL)  # a crash: in the middle of the pass
        """
    )
    crashed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=120)
    assert crashed.returncode == -9
    assert pending(app) == 30
    counted = [c for c in stored_counts(app) if c[1] is not None]
    assert len(counted) == 20
    with app.app_context():
        assert count_pending() == 30
    assert pending(app) == 0
    assert stored_counts(app) == expected_counts(app)


def test_the_background_pass_counts_new_rows_and_only_one_worker_runs_it(
    app, client, project_key, tmp_path
):
    lock = str(tmp_path / "pass.lock")
    first = TokenPass(0.02, lock, batch_rows=4)
    second = TokenPass(0.02, lock, batch_rows=4)
    first.start(app)
    try:
        # The pass runs at the lowest CPU priority: on a busy machine its first try at the lock
        # can take longer than any fixed sleep, so the test waits until it holds it.
        deadline = time.monotonic() + 30
        while first._lock_file is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert first._lock_file is not None
        second.start(app)
        post_many(client, project_key, 2)
        deadline = time.monotonic() + 30
        while pending(app) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pending(app) == 0
        assert first._lock_file is not None and second._lock_file is None
    finally:
        first.stop()
        second.stop()
    assert stored_counts(app) == expected_counts(app)


def test_the_cli_counts_what_is_pending(app, client, project_key, runner):
    post_many(client, project_key, 1, calls=3)
    result = runner.invoke(main, args=["tokens", "count"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "3 tool calls counted"
    assert pending(app) == 0


@pytest.mark.parametrize("batch", [1, 500])
def test_count_batch_reports_where_it_stopped(app, client, project_key, batch):
    post_many(client, project_key, 1, calls=3)
    with app.app_context():
        counted, last = count_batch(0, batch)
        assert counted == min(batch, 3) and last is not None
        assert count_batch(last, batch)[0] == min(batch, 3 - counted)


def test_a_write_tokenizes_nothing(app, client, project_key, monkeypatch):
    """The request path leaves every count to the pass: no tokenizer call while answering."""
    import webapp.tokens

    def refuse(*_args, **_kwargs):
        raise AssertionError("tokenized on the request path")

    monkeypatch.setattr(webapp.tokens, "estimate", refuse)
    monkeypatch.setattr("webapp.ingest.values.estimate", refuse)
    post_many(client, project_key, 2)
    assert pending(app) == 20


def post_turn(client, key, content: str = "What was the revenue?") -> None:
    turn = {
        "user": {"id": "u1", "role": "user", "content": content},
        "assistant": {"id": "a1", "model": "gpt-4", "content": "Revenue grew 12%."},
    }
    response = client.post("/api/v1/conversations/c1/turns", json=turn, headers=key.headers)
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.get_json()["user"]["content_tokens"] is None


def message_counts(app) -> list[tuple]:
    return raw_rows(app, "SELECT content, model, content_tokens FROM message ORDER BY id")


def test_message_contents_are_left_to_the_pass_and_counted_for_their_model(
    app, client, project_key
):
    post_turn(client, project_key)
    with app.app_context():
        assert pending_messages() == 2
        assert count_pending(kind=MESSAGES) == 2
        assert pending_messages() == 0
    assert message_counts(app) == [
        ("What was the revenue?", None, estimate("What was the revenue?").tokens),
        # gpt-4 is a cl100k_base model: counted with its own tokenizer, as ingestion did.
        ("Revenue grew 12%.", "gpt-4", estimate("Revenue grew 12%.", "gpt-4").tokens),
    ]


def test_a_message_whose_content_changed_while_counted_keeps_no_stale_count(
    app, client, project_key
):
    post_turn(client, project_key)
    with app.app_context():
        rows = db.session.execute(MESSAGES.rows, {"after": 0, "limit": 10}).all()
        params = [MESSAGES.params(row) for row in rows]
        db.session.execute(text("UPDATE message SET content = 'Another question?' WHERE id = :i"),
                           {"i": rows[0].id})  # fmt: skip
        db.session.execute(MESSAGES.store, params)
        db.session.commit()
        assert pending_messages() == 1  # the changed one: counted again by the next pass
        count_pending(kind=MESSAGES)
    assert message_counts(app)[0] == (
        "Another question?",
        None,
        estimate("Another question?").tokens,
    )


# -- yielding to a burst of writes ------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def paced_pass(tmp_path, clock: FakeClock, **overrides) -> TokenPass:
    """A pass whose rounds the test runs itself, at the times it sets: 5 rows a second or more
    is a burst here, and 30 s the bound on the lag."""
    settings = {"max_lag_seconds": 30.0, "burst_rows_per_second": 5.0, **overrides}
    return TokenPass(1.0, str(tmp_path / "pass.lock"), clock=clock, **settings)


def step_at(app, token_pass: TokenPass, clock: FakeClock, now: float) -> bool:
    clock.now = now
    with app.app_context():
        more = token_pass.step()
        db.session.remove()
    return more


def counted_messages(app) -> list[str]:
    """The messages whose calls were counted, in order; a message's calls are all or none."""
    rows = raw_rows(
        app,
        "SELECT m.external_id, count(t.arguments_tokens), count(*) FROM tool_invocation t "
        "JOIN message m ON m.id = t.message_id GROUP BY m.external_id ORDER BY min(t.id)",
    )
    assert all(counted in (0, calls) for _, counted, calls in rows), rows
    return [external_id for external_id, counted, _ in rows if counted]


def post_second(client, key, t: int) -> None:
    """The burst's writes of second `t`: one message of 10 calls (11 rows a second)."""
    post_tools(client, key, f"s{t}", [tool_item(0, c, response=f"r{t}.{c}") for c in range(10)])


def test_a_burst_defers_the_pass_until_rows_have_waited_the_max_lag_then_it_catches_up(
    app, client, project_key, tmp_path
):
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock)
    step_at(app, token_pass, clock, 0)  # an empty database
    for t in range(1, 31):
        post_second(client, project_key, t)
        assert not step_at(app, token_pass, clock, t)
        assert token_pass.yielding
        assert pending(app) == 10 * t  # nothing counted while the burst is young
    # Second 31: the rows of second 1 have waited 30 s; they are counted, and only they.
    post_second(client, project_key, 31)
    step_at(app, token_pass, clock, 31)
    assert counted_messages(app) == ["s1"]
    post_second(client, project_key, 32)
    step_at(app, token_pass, clock, 32)
    assert counted_messages(app) == ["s1", "s2"]
    assert token_pass.yielding and pending(app) == 300
    # The burst is over (nothing stored in the last second): everything is counted, once.
    step_at(app, token_pass, clock, 33)
    assert not token_pass.yielding
    assert pending(app) == 0
    assert stored_counts(app) == expected_counts(app)


def test_the_lag_bound_forces_progress_in_batches_while_the_burst_goes_on(
    app, client, project_key, tmp_path
):
    """Rows overdue by more than a batch: counted a batch per round, each round asking for the
    next at once, while the newer rows keep waiting."""
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock, max_lag_seconds=5.0, batch_rows=4)
    step_at(app, token_pass, clock, 0)
    for t in range(1, 6):
        post_second(client, project_key, t)
        assert not step_at(app, token_pass, clock, t)
        assert pending(app) == 10 * t
    post_second(client, project_key, 6)  # at 6 the 10 calls of second 1 are overdue
    assert step_at(app, token_pass, clock, 6)
    assert pending(app) == 60 - 4
    assert step_at(app, token_pass, clock, 6)
    assert pending(app) == 60 - 8
    assert not step_at(app, token_pass, clock, 6)
    assert pending(app) == 50
    assert counted_messages(app) == ["s1"]


def test_without_a_lag_bound_the_pass_counts_at_once_whatever_the_load(
    app, client, project_key, tmp_path
):
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock, max_lag_seconds=0.0)
    step_at(app, token_pass, clock, 0)
    for t in range(1, 6):
        post_second(client, project_key, t)
        step_at(app, token_pass, clock, t)
        assert pending(app) == 0 and not token_pass.yielding


def test_a_slow_trickle_is_counted_at_once(app, client, project_key, tmp_path):
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock)
    step_at(app, token_pass, clock, 0)
    for t in range(1, 4):
        post_second(client, project_key, t * 10)  # 11 rows every 10 s: 1.1 a second
        step_at(app, token_pass, clock, t * 10)
        assert pending(app) == 0


def test_the_full_scan_waits_for_the_end_of_a_burst_but_no_longer_than_the_bound(
    app, client, project_key, tmp_path
):
    """A response that comes after its call was counted makes the row pending below where the
    pass stands: only the full scan finds it. Due at 20 s, in a burst it waits until 30."""
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock, max_lag_seconds=10.0, full_scan_seconds=20.0)
    post_tools(client, project_key, "late", [tool_item(0, 0)])  # no response yet
    step_at(app, token_pass, clock, -1)  # the first round only samples
    step_at(app, token_pass, clock, 0)
    assert pending(app) == 0
    for t in range(1, 31):
        post_second(client, project_key, t)
        if t == 5:
            post_tools(client, project_key, "late", [tool_item(0, 0, response="it rains")])
        step_at(app, token_pass, clock, t)
        ((late_pending,),) = raw_rows(
            app,
            "SELECT count(*) FROM tool_invocation JOIN message ON message.id = message_id "
            "WHERE external_id = 'late' AND response_tokens IS NULL AND response IS NOT NULL",
        )
        assert late_pending == (5 <= t < 30), t
    # Meanwhile the lag bound kept the burst's own rows within 10 s of being counted.
    assert counted_messages(app) == ["late", *(f"s{t}" for t in range(1, 21))]
    step_at(app, token_pass, clock, 32)
    assert pending(app) == 0
    assert stored_counts(app) == expected_counts(app)


def test_arrivals_measure_the_rate_over_a_window_and_date_rows_by_their_ids():
    arrivals = Arrivals(max_lag=10.0, window=1.0)
    arrivals.add(100.0, (0, 0))
    assert arrivals.rate() == 0.0  # one sample: no rate yet
    assert arrivals.overdue() == (0, 0)
    arrivals.add(100.5, (400, 10))
    assert arrivals.rate() == 820.0  # since the first sample, the window not yet full
    arrivals.add(101.0, (900, 20))
    arrivals.add(101.2, (1000, 20))
    # From the newest sample at least a second old (100.0), not from the previous one.
    assert arrivals.rate() == pytest.approx((1000 + 20) / 1.2)
    assert arrivals.overdue() == (0, 0)  # no sample is 10 s old: nothing is overdue yet
    arrivals.add(110.9, (5000, 30))
    assert arrivals.overdue() == (400, 10)  # the newest sample at least 10 s old
    arrivals.add(111.2, (5000, 30))
    assert arrivals.overdue() == (1000, 20)
    # No sample between 101.2 and 110.9: the rate is the average since 101.2.
    assert arrivals.rate() == pytest.approx((4000 + 10) / 10)
    arrivals.add(112.3, (5000, 30))
    assert arrivals.rate() == 0.0


def test_count_batch_counts_nothing_above_its_bound(app, client, project_key):
    post_many(client, project_key, 1, calls=5)
    first = stored_counts(app)[0][0]
    with app.app_context():
        assert count_batch(0, 500, upto=first + 1) == (2, first + 1)
    assert pending(app) == 3


def test_the_max_lag_setting_reaches_the_pass(app):
    assert load({})["TOKEN_PASS_MAX_LAG_SECONDS"] == 30.0
    assert (
        load({"TOOLSCOPE_TOKEN_PASS_MAX_LAG_SECONDS": "7.5"})["TOKEN_PASS_MAX_LAG_SECONDS"] == 7.5
    )
    app.config["TOKEN_PASS_MAX_LAG_SECONDS"] = 7.5
    assert TokenPass.for_app(app).max_lag_seconds == 7.5


def test_a_pass_started_during_a_burst_counts_nothing_until_it_knows_and_dates_old_rows(
    app, client, project_key, tmp_path
):
    """Rows stored before the pass started are of unknown age. Its first round only samples
    (no tokenizer loaded, no write lock taken before it knows the rate); in a burst, rows found
    at its start wait until max_lag after it (a server started, or a pass restarted, in the
    middle of a burst), and without a burst they are counted at the second round."""
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock, max_lag_seconds=10.0)
    for t in range(3):
        post_second(client, project_key, t)  # before the pass's first round
    assert not step_at(app, token_pass, clock, 100)
    assert counted_messages(app) == []
    for t in range(101, 110):
        post_second(client, project_key, t)
        assert not step_at(app, token_pass, clock, t)
        assert counted_messages(app) == [], t
    post_second(client, project_key, 110)
    step_at(app, token_pass, clock, 110)
    assert counted_messages(app) == ["s0", "s1", "s2"]  # known at 100, now 10 s ago
    step_at(app, token_pass, clock, 115)  # the burst is over
    assert pending(app) == 0


def test_without_a_burst_a_new_pass_counts_at_its_second_round(app, client, project_key, tmp_path):
    post_many(client, project_key, 2)
    clock = FakeClock()
    token_pass = paced_pass(tmp_path, clock)
    step_at(app, token_pass, clock, 0)
    assert pending(app) == 20
    step_at(app, token_pass, clock, 1)
    assert pending(app) == 0
