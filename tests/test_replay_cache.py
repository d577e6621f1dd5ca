"""The replay answer cache (webapp.services.replay_cache) answers what the replay computes now.

The proof is a hypothesis state machine that drives the real write paths (the HTTP API: turns,
rounds, messages, MessageTool posts, conversation and channel updates, deletes, redaction
rules; the token pass; SQL by hand from another connection) and a fake clock that the replay
reads, and after every step compares the answers of the API, the page's JSON twin and the
download, asked twice (so the second comes from the cache when it may), with the bytes Flask's
``jsonify`` / ``export_file`` make of a replay computed from the database at that moment. On
SQLite and PostgreSQL (the ``app`` fixture).
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from dashboard_support import log_in
from flask import jsonify
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from webapp.db import db
from webapp.ingest.token_pass import MESSAGES, count_pending
from webapp.models import Conversation
from webapp.queries.conversations import find_conversation
from webapp.queries.histories import load_history
from webapp.replay import ReplayOptions, replay
from webapp.replay.export import (
    NoSuchTurn,
    OptionError,
    build_replay,
    export_file,
    parse_query,
)
from webapp.replay.history import History, Message, ServiceCall, ToolCall
from webapp.services import replay_cache
from webapp.tokens import STORED_COUNTER

BASE = "/api/v1/conversations"
# After any real time the test runs at: rows the API stamps with the real clock (no time given)
# are in the fake clock's past, so every expiry comes from the times the test chose.
T0 = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The replay's "now" (the API's and the page's), set by the test."""
    fake = FakeClock(T0)
    monkeypatch.setattr("webapp.api.replay.utcnow", fake)
    monkeypatch.setattr("webapp.views.replay.pages.utcnow", fake)
    return fake


def fresh(app, project_id: int, cid: str, params: dict[str, str], now: datetime, download: bool):
    """(status, body) of the replay computed now from the database, as the routes made it
    before the cache: ``jsonify`` of the document, or ``export_file``'s text."""
    with app.test_request_context():
        try:
            conversation = find_conversation(project_id, external_id=cid)
            if conversation is None:
                return 404, b""
            # Every row made again: the oracle does not share the worker's row memo.
            loaded = load_history(conversation)
            query = parse_query(params)
            built = build_replay(
                conversation,
                loaded.history,
                query,
                now=now,
                count_tokens=loaded.token_counter(),
                token_counter=STORED_COUNTER,
            )
            document = built.document()
            if download:
                return 200, export_file(document, cid, query.format)[0].encode()
            return 200, jsonify(document).get_data()
        except NoSuchTurn:  # the API's 404: the turn is not there
            return 404, b""
        except OptionError:
            return 422, b""
        finally:
            db.session.remove()


# The options every check asks for: "now" with the default window, no window and a short one;
# a turn; a fixed time; a cap and a budget; the download.
QUERIES: list[dict[str, str]] = [
    {},
    {"freshness": "30", "format": "anthropic"},
    {"freshness": "0.5", "persistence": "per-service-call", "format": "openai-responses"},
    {"as_of": "turn:1"},
    {"as_of": (T0 + timedelta(seconds=100)).isoformat(), "trim_trailing": "false"},
    {"freshness": "off", "result_token_cap": "3", "context_budget": "60", "prune": "turns"},
]
OFFSETS = [-3600, -301, -300, -299.5, -30, -1, -0.000001, 0, 0.000001, 0.5, 1, 30, 299, 400]
STEPS = [0, 0.000001, 0.5, 1, 29, 30, 31, 299, 300, 301, 3600]


class ReplayCacheMachine(RuleBasedStateMachine):
    """One conversation written through every path while the clock moves; see the module."""

    app: Any
    client: Any
    dashboard: Any
    key: Any
    clock: FakeClock
    outside: sa.Engine

    def __init__(self) -> None:
        super().__init__()
        self.cid = f"c-{uuid.uuid4().hex[:10]}"
        self.ids = itertools.count()
        self.assistants: list[str] = []
        self.calls: list[tuple[str, str]] = []  # (message id, call id) of MessageTool posts
        self.exists = False
        # The token pass runs after each write (as a server's does, a second later): answers
        # with rows it has not counted are not cached, so without it little would be.
        self.auto_count = True
        self.clock.now = T0
        # Each example starts from an empty cache (the counters run on across examples).
        replay_cache.get_cache(self.app).clear()
        with self.outside.begin() as conn:
            conn.execute(sa.text("UPDATE project SET freshness_seconds = 300"))

    # --- helpers ------------------------------------------------------------------------------

    def at(self, offset: float) -> str:
        return (self.clock.now + timedelta(seconds=offset)).isoformat()

    def post(self, path: str, body: dict[str, Any], method: str = "post") -> None:
        """A write; one the API refuses (a finished run's round, a call moved) changes nothing
        and is as good a step as any."""
        response = getattr(self.client, method)(path, json=body, headers=self.key.headers)
        assert response.status_code < 500, response.get_data(as_text=True)
        if self.auto_count:
            self.token_pass()

    def new_id(self, kind: str) -> str:
        return f"{self.cid}-{kind}{next(self.ids)}"

    # --- writes -------------------------------------------------------------------------------

    @initialize(channel=st.sampled_from([None, "fast", "slow"]))
    def create(self, channel: str | None) -> None:
        body: dict[str, Any] = {"title": "t", "system_prompt": "Be brief."}
        if channel:
            body["channel"] = channel
        self.post(f"{BASE}/{self.cid}", body, "put")
        self.exists = True

    @rule(
        user=st.sampled_from(OFFSETS),
        status=st.sampled_from(["completed", "failed", "in_progress", None]),
        rounds=st.lists(
            st.lists(
                st.tuples(
                    st.sampled_from(OFFSETS),
                    st.one_of(st.none(), st.sampled_from(OFFSETS)),
                    st.sampled_from(["", "x", '[{"source_number": 1, "text": "a"}]']),
                ),
                min_size=1,
                max_size=2,
            ),
            max_size=3,
        ),
        answer=st.sampled_from([None, "Done [source1].", "ok"]),
    )
    def turn(self, user, status, rounds, answer) -> None:
        assistant = self.new_id("a")
        body: dict[str, Any] = {
            "user": {"id": self.new_id("u"), "content": "Question?", "created_at": self.at(user)},
            "assistant": {
                "id": assistant,
                "content": answer,
                "model": "gpt-4o",
                "created_at": self.at(user + 0.1),
                "rounds": [
                    {
                        "calls": [
                            {
                                "id": self.new_id("call_"),
                                "name": "search",
                                "arguments": {"q": "x"},
                                "created_at": self.at(made),
                                **(
                                    {"response": {"content": text, "created_at": self.at(done)}}
                                    if done is not None
                                    else {}
                                ),
                            }
                            for made, done, text in calls
                        ],
                        "usage": {"input_tokens": 5, "created_at": self.at(made_usage)},
                    }
                    for calls in rounds
                    for made_usage in [calls[0][0]]
                ],
            },
        }
        if status is not None:
            body["assistant"]["status"] = status
        self.post(f"{BASE}/{self.cid}/turns", body)
        self.exists = True
        self.assistants.append(assistant)

    @precondition(lambda self: self.assistants)
    @rule(
        data=st.data(),
        status=st.sampled_from([None, "completed", "failed"]),
        done=st.one_of(st.none(), st.sampled_from(OFFSETS)),
    )
    def round(self, data, status, done) -> None:
        mid = data.draw(st.sampled_from(self.assistants))
        index = data.draw(st.integers(0, 4))
        call: dict[str, Any] = {"id": self.new_id("call_"), "name": "fetch", "arguments": {}}
        if done is not None:
            call["response"] = {"content": "r", "created_at": self.at(done)}
        body: dict[str, Any] = {"calls": [call], "usage": {"output_tokens": 3}}
        if status:
            body["status"] = status
        self.post(f"{BASE}/{self.cid}/messages/{mid}/rounds/{index}", body)
        self.exists = True

    @rule(role=st.sampled_from(["user", "system", "assistant"]), offset=st.sampled_from(OFFSETS))
    def message(self, role, offset) -> None:
        body = {
            "messages": [
                {
                    "id": self.new_id("m"),
                    "role": role,
                    "content": "hi",
                    "created_at": self.at(offset),
                }
            ]
        }
        self.post(f"{BASE}/{self.cid}/messages", body)
        self.exists = True

    @precondition(lambda self: self.assistants)
    @rule(data=st.data(), answered=st.booleans())
    def message_tool(self, data, answered) -> None:
        """The MessageTool API: calls, then their responses, posted to a message by id."""
        mid = data.draw(st.sampled_from(self.assistants))
        if answered and self.calls:
            mid, call_id = data.draw(st.sampled_from(self.calls))
            tool = {"id": call_id, "name": "lookup", "arguments": {}, "response": {"content": "r"}}
        else:
            call_id = self.new_id("call_")
            tool = {"id": call_id, "name": "lookup", "arguments": {"k": 1}}
            self.calls.append((mid, call_id))
        self.post("/api/v1/messages/tools", {"messageId": mid, "tools": [tool]})

    @rule(
        title=st.sampled_from([None, "t", "u"]),
        prompt=st.sampled_from([None, "Be brief.", "Cite."]),
        channel=st.sampled_from([None, "fast", "slow"]),
        tools=st.sampled_from([None, [], [{"name": "search"}, {"name": "get weather"}]]),
    )
    def put_conversation(self, title, prompt, channel, tools) -> None:
        body = {
            k: v
            for k, v in {
                "title": title,
                "system_prompt": prompt,
                "channel": channel,
                "tools": tools,
            }.items()
            if v is not None
        }
        self.post(f"{BASE}/{self.cid}", body, "put")
        self.exists = True

    @rule(name=st.sampled_from(["fast", "slow"]), seconds=st.sampled_from([None, 0, 10, 30, 300]))
    def channel_window(self, name, seconds) -> None:
        self.post(f"/api/v1/channels/{name}", {"freshness_seconds": seconds}, "put")

    @rule()
    def redaction_rule(self) -> None:
        body = {"name": self.new_id("mask"), "kind": "mask", "value": ["email"]}
        self.post("/api/v1/redaction-rules", body)

    @rule()
    def toggle_counting(self) -> None:
        self.auto_count = not self.auto_count

    @rule()
    def token_pass(self) -> None:
        with self.app.app_context():
            count_pending()
            count_pending(kind=MESSAGES)
            db.session.remove()

    @rule()
    def delete_and_recreate(self) -> None:
        """Deleted, then made again under the same id: on SQLite it may get the same row id
        and revision (the trigger's replay_state bump tells them apart)."""
        response = self.client.delete(f"{BASE}/{self.cid}", headers=self.key.headers)
        assert response.status_code in (204, 404)
        self.assistants, self.calls = [], []
        self.post(f"{BASE}/{self.cid}", {"title": "t"}, "put")

    # --- SQL by hand, from another connection -------------------------------------------------

    @rule(seconds=st.sampled_from([None, 0, 60, 300]))
    def outside_project_window(self, seconds) -> None:
        with self.outside.begin() as conn:
            conn.execute(sa.text("UPDATE project SET freshness_seconds = :s"), {"s": seconds})

    @rule(seconds=st.sampled_from([None, 1, 300]))
    def outside_channel_window(self, seconds) -> None:
        with self.outside.begin() as conn:
            conn.execute(sa.text("UPDATE channel SET freshness_seconds = :s"), {"s": seconds})

    @rule(title=st.sampled_from(["t", "by hand"]))
    def outside_title(self, title) -> None:
        with self.outside.begin() as conn:
            conn.execute(
                sa.text("UPDATE conversation SET title = :t WHERE external_id = :c"),
                {"t": title, "c": self.cid},
            )

    @rule()
    def outside_rows_with_revision(self) -> None:
        """A hand-written change of the rows, bumping the revision as docs/replay.md asks."""
        with self.outside.begin() as conn:
            conn.execute(
                sa.text(
                    "UPDATE tool_invocation SET response = 'edited', response_tokens = 1 "
                    "WHERE message_id IN (SELECT m.id FROM message m JOIN conversation c "
                    "ON c.id = m.conversation_id WHERE c.external_id = :c)"
                ),
                {"c": self.cid},
            )
            conn.execute(
                sa.text("UPDATE conversation SET revision = revision + 1 WHERE external_id = :c"),
                {"c": self.cid},
            )

    @rule()
    def outside_delete(self) -> None:
        with self.outside.begin() as conn:
            conn.execute(
                sa.text("DELETE FROM conversation WHERE external_id = :c"), {"c": self.cid}
            )
        self.assistants, self.calls = [], []
        self.post(f"{BASE}/{self.cid}", {"title": "t"}, "put")

    # --- the clock ----------------------------------------------------------------------------

    @rule(seconds=st.sampled_from(STEPS))
    def advance(self, seconds) -> None:
        self.clock.now += timedelta(seconds=seconds)

    @rule(data=st.data(), delta=st.sampled_from([-1, 0, 1]))
    def to_an_expiry(self, data, delta) -> None:
        """The clock to just before, at or after the moment an entry expires."""
        cache = replay_cache.get_cache(self.app)
        moments = sorted({e.expires for e in cache.values() if e.expires is not None})
        if moments:
            # An index drawn from a fixed range: the draw does not depend on how many there are.
            moment = moments[data.draw(st.integers(0, 7)) % len(moments)]
            self.clock.now = max(self.clock.now, moment + timedelta(microseconds=delta))

    @rule()
    def clock_back(self) -> None:
        """Wall clocks may step back: an entry is not used before the moment it was made."""
        self.clock.now -= timedelta(seconds=1)

    # --- the check ----------------------------------------------------------------------------

    @invariant()
    def cached_answers_are_fresh_answers(self) -> None:
        project_id = self.key.project_id
        with self.app.app_context():
            row = db.session.execute(
                sa.text("SELECT id FROM conversation WHERE external_id = :c"), {"c": self.cid}
            ).first()
            db.session.remove()
        if row is None:
            return
        for params in QUERIES:
            want = fresh(self.app, project_id, self.cid, params, self.clock.now, False)
            for _ in range(2):
                got = self.client.get(
                    f"{BASE}/{self.cid}/replay", query_string=params, headers=self.key.headers
                )
                assert got.status_code == want[0], got.get_data(as_text=True)
                if want[0] == 200:
                    assert got.get_data() == want[1], params
        params = QUERIES[0]
        want = fresh(self.app, project_id, self.cid, params, self.clock.now, True)
        for _ in range(2):
            got = self.client.get(
                f"{BASE}/{self.cid}/replay",
                query_string={**params, "download": "true"},
                headers=self.key.headers,
            )
            assert (got.status_code, got.get_data()) == want
            page = self.dashboard.get(f"/conversations/{row.id}/replay/download")
            assert (page.status_code, page.get_data()) == want
            assert page.headers["Content-Disposition"] == got.headers["Content-Disposition"]
        params = QUERIES[2]
        want = fresh(self.app, project_id, self.cid, params, self.clock.now, False)
        for _ in range(2):
            page = self.dashboard.get(f"/conversations/{row.id}/replay.json", query_string=params)
            assert (page.status_code, page.get_data()) == want


@pytest.fixture
def outside(app) -> Iterator[sa.Engine]:
    """Another connection to the same database: SQL by hand, as psql or sqlite3 would send."""
    engine = sa.create_engine(app.config["DATABASE_URL"])
    if engine.dialect.name == "sqlite":
        # As the app's connections do (webapp.db): a deleted conversation takes its rows along.
        sa.event.listen(
            engine, "connect", lambda conn, _record: conn.execute("PRAGMA foreign_keys=ON")
        )
    yield engine
    engine.dispose()


def test_cached_answers_are_the_answers_computed_now(app, client, project_key, clock, outside):
    log_in(app, client)
    with client.session_transaction() as session:
        session["project_id"] = project_key.project_id
    ReplayCacheMachine.app = app
    ReplayCacheMachine.client = client
    ReplayCacheMachine.dashboard = client
    ReplayCacheMachine.key = project_key
    ReplayCacheMachine.clock = clock
    ReplayCacheMachine.outside = outside
    run_state_machine_as_test(
        ReplayCacheMachine,
        settings=settings(
            # More to hunt longer: TOOLSCOPE_TEST_REPLAY_CACHE_EXAMPLES=200.
            max_examples=int(os.environ.get("TOOLSCOPE_TEST_REPLAY_CACHE_EXAMPLES", "12")),
            stateful_step_count=15,
            deadline=None,
            # Bounded time: a failure is reported as found, not shrunk (each step is a few
            # dozen requests).
            phases=(Phase.explicit, Phase.reuse, Phase.generate),
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
    cache = replay_cache.get_cache(app)
    # The machine exercised the cache, not only its misses.
    assert cache.hits > 0


# --- A hit's cost, the setting, the bound ---------------------------------------------------


def _store(client, key, cid: str = "c1") -> None:
    body = {
        "user": {"id": "u1", "content": "Hi", "created_at": "2026-01-01T00:00:00Z"},
        "assistant": {
            "id": "a1",
            "content": "Done.",
            "created_at": "2026-01-01T00:00:00.5Z",
            "rounds": [
                {
                    "calls": [
                        {
                            "id": "call_1",
                            "name": "search",
                            "arguments": {"q": "x"},
                            "created_at": "2026-01-01T00:00:01Z",
                            "response": {"content": "r", "created_at": "2026-01-01T00:00:02Z"},
                        }
                    ]
                }
            ],
        },
    }
    assert client.post(f"{BASE}/{cid}/turns", json=body, headers=key.headers).status_code == 201


def test_a_hit_costs_a_constant_few_statements(app, client, project_key, count_queries):
    _store(client, project_key)
    with app.app_context():
        count_pending()
        count_pending(kind=MESSAGES)
    url = f"{BASE}/c1/replay?freshness=off"
    first = client.get(url, headers=project_key.headers)
    with count_queries() as q:
        second = client.get(url, headers=project_key.headers)
    assert second.get_data() != first.get_data()  # as_of is now, spliced in
    assert second.get_json()["payload"] == first.get_json()["payload"]
    assert replay_cache.get_cache(app).hits == 1
    # The key's version, the conversation record, its revision and the replay state.
    assert q.count == 3, q.statements


def test_rows_the_token_pass_has_not_counted_are_not_cached(app, client, project_key):
    _store(client, project_key)
    url = f"{BASE}/c1/replay?freshness=off"
    client.get(url, headers=project_key.headers)
    assert len(replay_cache.get_cache(app)) == 0
    with app.app_context():
        count_pending()
        count_pending(kind=MESSAGES)
    client.get(url, headers=project_key.headers)
    assert len(replay_cache.get_cache(app)) == 1


# A call id that looks like what the cache cuts the answer at: the words of the age's message,
# a quote, the markers' prefix, characters JSON escapes.
HOSTILE_ID = 'c"1 is 5 s old, now-0123 t0 \u2028\u00e9\\'


@pytest.mark.parametrize("call_id", ["call_1", HOSTILE_ID])
@pytest.mark.parametrize("params", [{}, {"download": "true", "format": "anthropic"}])
def test_an_answer_with_stale_results_is_kept_and_says_their_age_at_each_request(
    app, client, project_key, clock, call_id, params
):
    """With as_of=now a stale result's diagnostic says its age, which grows with the clock: the
    cached answer has it written in at each request, as the replay would say it then."""
    call = {"name": "search", "arguments": {"q": "x"}, "created_at": "2026-01-01T00:00:01Z"}
    response = {"content": "r", "created_at": "2026-01-01T00:00:02.250001Z"}
    body = {
        "user": {"id": "u1", "content": "Hi", "created_at": "2026-01-01T00:00:00Z"},
        "assistant": {
            "id": "a1",
            "content": "Done.",
            "created_at": "2026-01-01T00:00:00.5Z",
            "rounds": [
                {"calls": [{**call, "id": call_id, "response": response}]},
                {"calls": [{**call, "id": "call_2", "response": {"content": "s"}}]},
            ],
        },
    }
    headers = project_key.headers
    assert client.post(f"{BASE}/c1/turns", json=body, headers=headers).status_code == 201
    _counted(app)
    ages = set()
    for step in (0, 1e-6, 0.5, 1, 3600):
        clock.now += timedelta(seconds=step)
        want = fresh(app, project_key.project_id, "c1", params, clock.now, "download" in params)
        for _ in range(2):
            got = client.get(f"{BASE}/c1/replay", query_string=params, headers=headers)
            assert (got.status_code, got.get_data()) == want
        stale = [d for d in json.loads(want[1])["diagnostics"] if d["kind"] == "stale"]
        assert len(stale) == 2
        ages.add(tuple(d["detail"]["age_seconds"] for d in stale))
    assert len(ages) == 5  # the ages moved with the clock, and the answers with them
    cache = replay_cache.get_cache(app)
    assert (cache.misses, cache.hits, len(cache)) == (1, 9, 1)


@pytest.mark.parametrize("app_config", [{"REPLAY_CACHE_MB": 0}])
def test_zero_megabytes_turns_the_cache_off(app, client, project_key):
    _store(client, project_key)
    with app.app_context():
        count_pending()
        count_pending(kind=MESSAGES)
    for _ in range(2):
        assert (
            client.get(f"{BASE}/c1/replay?freshness=off", headers=project_key.headers).status_code
            == 200
        )
    cache = replay_cache.get_cache(app)
    assert not cache.enabled and len(cache) == 0 and cache.hits == 0


def test_the_cache_keeps_under_its_bound_least_recently_used_out_first() -> None:
    cache = replay_cache.ReplayCache(100)
    record: Any = object()
    entry = replay_cache.Entry((1, 0), record, (b"x" * 40,), (), None, None)
    for key in ("a", "b", "c"):
        cache.put((key,), entry)
    assert [k for (k,) in cache.order()] == ["b", "c"]
    assert cache.get(("b",), (1, 0), record, T0) == (b"x" * 40,)
    cache.put(("d",), entry)
    assert [k for (k,) in cache.order()] == ["b", "d"]
    cache.put(("e",), replay_cache.Entry((1, 0), record, (b"x" * 101,), (), None, None))
    assert ("e",) not in cache.order()  # larger than the whole cache: not kept


# --- The clock: when an answer as of now stops holding --------------------------------------


def _history() -> History:
    call = ToolCall(
        row_id=1,
        external_id="c",
        function_name="f",
        arguments={},
        round_index=0,
        sequence_index=0,
        created_at=T0,
        response="r",
        response_created_at=T0 + timedelta(seconds=2),
    )
    usage = ServiceCall(1, None, 1, 1, None, T0 + timedelta(seconds=1.5))
    message = Message(
        row_id=1,
        external_id="a",
        role="assistant",
        content="x",
        created_at=T0 - timedelta(seconds=1),
        tool_calls=(call,),
        service_calls=(usage,),
    )
    return History("c", None, None, (), (message,))


def test_the_next_change_is_the_next_stored_time_or_freshness_deadline() -> None:
    history = _history()
    second = timedelta(seconds=1)
    assert replay_cache.next_change(history, None, T0 - 2 * second) == T0 - second
    assert replay_cache.next_change(history, None, T0) == T0 + 1.5 * second
    assert replay_cache.next_change(history, None, T0 + 1.5 * second) == T0 + 2 * second
    assert replay_cache.next_change(history, None, T0 + 2 * second) is None
    # The window's deadline: the response's time + the window, rounded down to the µs.
    assert replay_cache.next_change(history, 10, T0 + 5 * second) == T0 + 12 * second
    # A deadline equal to now: the result turns stale right after, the answer ends at once.
    half = T0 + 2.5 * second
    assert replay_cache.next_change(history, 0.5, half) == half
    third = replay_cache.next_change(history, 1 / 3, T0 + 2 * second)
    assert third == T0 + 2 * second + timedelta(microseconds=333333)


@pytest.mark.parametrize("window", [0, 0.1, 1 / 3, 1e-7, 2.5000005, 300])
def test_no_result_turns_stale_before_its_deadline(window: float) -> None:
    """A microsecond before the deadline the replay still keeps the result (the entry expires
    at the deadline, so it is never used past the moment the result turns stale)."""
    history = _history()
    response_at = T0 + timedelta(seconds=2)
    deadline = response_at + replay_cache._floor_seconds(window)
    before = deadline - timedelta(microseconds=1)
    if before < response_at:
        return
    result = replay(history, ReplayOptions(as_of=before, freshness_seconds=window))
    assert not any(d.kind == "stale" for d in result.diagnostics)
    assert result.stats["calls_included"] == 1
    later = replay(
        history, ReplayOptions(as_of=deadline + timedelta(seconds=1), freshness_seconds=window)
    )
    assert any(d.kind == "stale" for d in later.diagnostics)


def _counted(app) -> None:
    with app.app_context():
        count_pending()
        count_pending(kind=MESSAGES)
        db.session.remove()


@pytest.mark.parametrize(
    "params",
    [
        {},  # the stored results are stale: their age is in the answer
        {"freshness": "off"},  # nothing moves with the clock but as_of itself
        {"freshness": "off", "format": "anthropic", "download": "true"},
    ],
)
def test_answers_as_of_now_follow_the_clock(app, client, project_key, clock, params):
    _store(client, project_key)
    _counted(app)
    url = f"{BASE}/c1/replay"
    for step in (0, 1e-6, 1, 3600):
        clock.now += timedelta(seconds=step)
        want = fresh(app, project_key.project_id, "c1", params, clock.now, "download" in params)
        for _ in range(2):
            got = client.get(url, query_string=params, headers=project_key.headers)
            assert (got.status_code, got.get_data()) == want


def test_an_answer_expires_when_a_stored_time_comes(app, client, project_key, clock):
    """A row stored with a time ahead of the clock does not exist yet; once the clock reaches
    it, the cached answer is not used any more."""
    future = (T0 + timedelta(seconds=10)).isoformat()
    body = {"messages": [{"id": "later", "role": "user", "content": "Later", "created_at": future}]}
    _store(client, project_key)
    assert (
        client.post(f"{BASE}/c1/messages", json=body, headers=project_key.headers).status_code
        == 201
    )
    _counted(app)
    url = f"{BASE}/c1/replay?freshness=off"
    for moment in (T0, T0 + timedelta(seconds=9.999999), T0 + timedelta(seconds=10)):
        clock.now = moment
        want = fresh(app, project_key.project_id, "c1", {"freshness": "off"}, moment, False)
        for _ in range(2):
            assert client.get(url, headers=project_key.headers).get_data() == want[1]
    cache = replay_cache.get_cache(app)
    assert cache.hits >= 2


def test_a_conversation_deleted_and_made_again_is_not_answered_from_the_cache(
    app, client, project_key, outside
):
    """SQLite may give the new conversation the old one's row id, and its revision starts
    again: the delete's trigger (replay_state) tells them apart, whoever deletes."""
    _store(client, project_key)
    _counted(app)
    url = f"{BASE}/c1/replay?freshness=off&as_of=2026-02-01T00:00:00Z"
    first = client.get(url, headers=project_key.headers).get_json()
    assert first["stats"]["calls_total"] == 1
    with outside.begin() as conn:
        conn.execute(sa.text("DELETE FROM conversation WHERE external_id = 'c1'"))
    body = {
        "messages": [
            {"id": "u9", "role": "user", "content": "Other", "created_at": "2026-01-01T00:00:00Z"}
        ]
    }
    assert (
        client.post(f"{BASE}/c1/messages", json=body, headers=project_key.headers).status_code
        == 201
    )
    _counted(app)
    second = client.get(url, headers=project_key.headers).get_json()
    assert second["stats"]["calls_total"] == 0


def test_settings_changed_by_hand_are_seen(app, client, project_key, outside):
    """The channel's and project's windows and the conversation's fields are read by every
    request (the record) and compared with the entry's."""
    _store(client, project_key)
    _counted(app)
    url = f"{BASE}/c1/replay?as_of=2026-01-01T00:01:00Z"
    assert client.get(url, headers=project_key.headers).get_json()["stats"]["calls_omitted"] == {}
    with outside.begin() as conn:
        conn.execute(sa.text("UPDATE project SET freshness_seconds = 10"))
    doc = client.get(url, headers=project_key.headers).get_json()
    assert doc["stats"]["calls_omitted"] == {"stale": 1}
    with outside.begin() as conn:
        conn.execute(sa.text("UPDATE conversation SET title = 'by hand'"))
    assert (
        client.get(url, headers=project_key.headers).get_json()["conversation"]["title"]
        == "by hand"
    )


def test_a_deleted_conversation_put_back_row_for_row_is_not_answered_from_the_cache(
    app, client, project_key, outside
):
    """The same row id, revision, times and fields, without its messages: only the delete's
    trigger (replay_state) tells the two apart."""
    _store(client, project_key)
    _counted(app)
    url = f"{BASE}/c1/replay?freshness=off&as_of=2026-02-01T00:00:00Z"
    assert client.get(url, headers=project_key.headers).get_json()["stats"]["calls_total"] == 1
    table = Conversation.__table__
    with outside.begin() as conn:
        row = dict(conn.execute(sa.select(table)).mappings().one())
        conn.execute(sa.text("DELETE FROM conversation WHERE id = :id"), {"id": row["id"]})
        conn.execute(sa.insert(table).values(**row))
    doc = client.get(url, headers=project_key.headers).get_json()
    assert doc["stats"]["calls_total"] == 0


def test_otlp_spans_arriving_later_are_seen(app, client, project_key):
    """The OTLP projection rewrites a conversation's turns as spans arrive: it bumps the
    revision of every conversation it changes."""
    from tests.otlp_support import T0 as OTLP_T0
    from tests.otlp_support import agent_run, traces_protobuf

    first = agent_run(1, rounds=3, conversation="otlp-1").spans
    second = agent_run(2, rounds=2, conversation="otlp-1", start=OTLP_T0 + 10**12).spans
    # Half a run (perhaps no turn yet: 404), the whole run, then a second run.
    parts = [first[: len(first) // 2], first[len(first) // 2 :], second]
    url = f"{BASE}/otlp-1/replay?freshness=off&as_of=2100-01-01T00:00:00Z"
    params = {"freshness": "off", "as_of": "2100-01-01T00:00:00Z"}
    for part in parts:
        headers = {"Content-Type": "application/x-protobuf", **project_key.headers}
        assert (
            client.post("/v1/traces", data=traces_protobuf(part), headers=headers).status_code
            == 200
        )
        _counted(app)
        want = fresh(app, project_key.project_id, "otlp-1", params, T0, False)
        for _ in range(2):
            got = client.get(url, headers=project_key.headers)
            assert got.status_code == want[0]
            if want[0] == 200:
                assert got.get_data() == want[1]
    assert want[0] == 200 and replay_cache.get_cache(app).hits >= 2
    assert json.loads(want[1])["stats"]["calls_total"] > 4  # both runs are in


def test_an_answer_made_at_a_freshness_deadline_is_not_used_after_it(
    app, client, project_key, clock
):
    """Made exactly when a result's age equals the window (kept), asked a microsecond later
    (stale): found by the state machine."""
    _store(client, project_key)
    _counted(app)
    params = {"freshness": "0.5", "format": "openai-responses"}
    response_at = datetime(2026, 1, 1, 0, 0, 2, tzinfo=UTC)
    for moment in (response_at + timedelta(seconds=0.5), response_at + timedelta(seconds=0.500001)):
        clock.now = moment
        want = fresh(app, project_key.project_id, "c1", params, moment, False)
        for _ in range(2):
            got = client.get(f"{BASE}/c1/replay", query_string=params, headers=project_key.headers)
            assert got.get_data() == want[1]
    assert b'"stale"' in want[1]
