"""A conversation deleted while writers append to it (issue 22, item 2), on the real PostgreSQL.

Writer threads post whole turns, per-round appends and OTLP exports over HTTP to a live server,
into a few conversations, while deleter threads delete those conversations from the API, the
page (a logged-in dashboard session) and the CLI. Bounded: at most a fixed number of requests
per thread, and none started after ~15 s.

Every race must end cleanly: no 5xx but a 503 with Retry-After (which stored nothing); a write
acknowledged with no delete of its conversation after it is sent is there, in that conversation
(re-created if need be); a write acknowledged before a delete of its conversation started is
gone (nothing resurrected, by a retry or by a later export re-projecting left-over spans); no
row is left without what it belongs to (messages, calls, usage, OTLP turns and their traces,
raw spans, log records and links).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from api_support import raw_rows
from dashboard_support import csrf_token, dashboard_fixture  # noqa: F401
from otlp_support import agent_run, traces_json

from webapp.cli import main

CONVERSATIONS = [f"race-{k}" for k in range(3)]
SECONDS = 15.0  # no request is started after this
WRITES_PER_THREAD = 60
DELETES_PER_THREAD = 40
TIMEOUT = 60  # per request: a loaded 2-core machine


@dataclass
class Outcome:
    kind: str  # turn, round, otlp / api, page, cli
    cid: str
    key: str  # what the write stored: a message id, a call id or a trace id
    sent: float
    answered: float
    status: int
    detail: str = ""
    retry_after: str | None = None


@dataclass
class Log:
    writes: list[Outcome] = field(default_factory=list)
    deletes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, target: list[Outcome], outcome: Outcome) -> None:
        with self.lock:
            target.append(outcome)


def _post(session: requests.Session, url: str, **kwargs: Any) -> tuple[float, float, Any]:
    sent = time.monotonic()
    response = session.post(url, timeout=TIMEOUT, **kwargs)
    return sent, time.monotonic(), response


def _write(log: Log, kind: str, cid: str, key: str, timed: tuple[float, float, Any]) -> None:
    sent, answered, response = timed
    log.add(
        log.writes,
        Outcome(
            kind,
            cid,
            key,
            sent,
            answered,
            response.status_code,
            response.text[:300],
            response.headers.get("Retry-After"),
        ),
    )


def _turn_writer(base: str, headers: dict, log: Log, writer: int, stop: float) -> None:
    rng = random.Random(writer)
    with requests.Session() as session:
        session.headers.update(headers)
        for i in range(WRITES_PER_THREAD):
            if time.monotonic() > stop:
                return
            cid = rng.choice(CONVERSATIONS)
            key = f"t{writer}-{i}"
            body = {
                "user": {"id": f"{key}-u", "content": f"question {key}"},
                "assistant": {
                    "id": f"{key}-a",
                    "content": f"answer {key}",
                    "model": "gpt-4o",
                    "rounds": [
                        {
                            "usage": {"input_tokens": 100, "output_tokens": 10},
                            "calls": [
                                {
                                    "id": f"{key}-c",
                                    "name": "search",
                                    "arguments": {"q": key},
                                    "response": {"content": f"result {key}"},
                                }
                            ],
                        }
                    ],
                },
            }
            url = f"{base}/api/v1/conversations/{cid}/turns"
            _write(log, "turn", cid, f"{key}-a", _post(session, url, json=body))


def _round_writer(base: str, headers: dict, log: Log, writer: int, stop: float) -> None:
    rng = random.Random(100 + writer)
    with requests.Session() as session:
        session.headers.update(headers)
        for i in range(WRITES_PER_THREAD // 2):
            cid = rng.choice(CONVERSATIONS)
            for r in range(2):
                if time.monotonic() > stop:
                    return
                key = f"r{writer}-{i}-{r}"
                body: dict[str, Any] = {
                    "calls": [
                        {
                            "id": key,
                            "name": "lookup",
                            "arguments": {"k": key},
                            "response": {"content": f"found {key}"},
                        }
                    ],
                    "usage": {"model": "gpt-4o", "input_tokens": 10, "output_tokens": 5},
                }
                if r == 1:
                    body["status"] = "completed"
                url = f"{base}/api/v1/conversations/{cid}/messages/r{writer}-{i}/rounds/{r}"
                _write(log, "round", cid, key, _post(session, url, json=body))


def _otlp_writer(base: str, headers: dict, log: Log, writer: int, stop: float) -> None:
    rng = random.Random(200 + writer)
    with requests.Session() as session:
        session.headers.update({**headers, "Content-Type": "application/json"})
        for i in range(WRITES_PER_THREAD // 2):
            if time.monotonic() > stop:
                return
            cid = rng.choice(CONVERSATIONS)
            run = agent_run(1000 * (writer + 1) + i, rounds=2, parallel=1, conversation=cid)
            trace_id = run.spans[0].trace_id
            timed = _post(session, f"{base}/v1/traces", data=traces_json(run.spans))
            _write(log, "otlp", cid, trace_id, timed)


def _deleter(kind: str, delete_one: Any, log: Log, seed: int, done: threading.Event) -> None:
    rng = random.Random(seed)
    for _ in range(DELETES_PER_THREAD):
        if done.wait(rng.uniform(0.1, 0.5)):
            return
        cid = rng.choice(CONVERSATIONS)
        sent = time.monotonic()
        try:
            status, detail, retry_after = delete_one(cid)
        except Exception as exc:  # the harness reports it: the test fails below
            status, detail, retry_after = 599, repr(exc), None
        log.add(
            log.deletes,
            Outcome(kind, cid, cid, sent, time.monotonic(), status, detail, retry_after),
        )


def _row_id(app, cid: str) -> int | None:
    rows = raw_rows(app, f"SELECT id FROM conversation WHERE external_id = '{cid}'")
    return rows[0][0] if rows else None


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_deletes_racing_turns_rounds_and_otlp_exports(app, live_server, project_key, dashboard):
    token = csrf_token(dashboard)
    cli = app.test_cli_runner()
    log = Log()
    headers = project_key.headers

    def api_delete(cid: str) -> tuple[int, str, str | None]:
        response = requests.delete(
            f"{live_server}/api/v1/conversations/{cid}", headers=headers, timeout=TIMEOUT
        )
        return response.status_code, response.text[:300], response.headers.get("Retry-After")

    def page_delete(cid: str) -> tuple[int, str, str | None]:
        row_id = _row_id(app, cid)
        if row_id is None:
            return 404, "not there", None
        response = dashboard.post(f"/conversations/{row_id}/delete", data={"csrf_token": token})
        return (
            response.status_code,
            response.get_data(as_text=True)[:300],
            (response.headers.get("Retry-After")),
        )

    def cli_delete(cid: str) -> tuple[int, str, str | None]:
        result = cli.invoke(main, ["conversations", "delete", project_key.slug, cid, "--yes"])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            return 599, repr(result.exception), None
        if result.exit_code == 0:
            return 204, result.output, None
        return (404 if "no conversation" in result.output else 598), result.output, None

    stop = time.monotonic() + SECONDS
    done = threading.Event()
    writers = [
        threading.Thread(target=_turn_writer, args=(live_server, headers, log, w, stop))
        for w in range(2)
    ]
    writers.append(
        threading.Thread(target=_round_writer, args=(live_server, headers, log, 0, stop))
    )
    writers += [
        threading.Thread(target=_otlp_writer, args=(live_server, headers, log, w, stop))
        for w in range(2)
    ]
    deleters = [
        threading.Thread(target=_deleter, args=(kind, fn, log, seed, done))
        for seed, (kind, fn) in enumerate(
            [("api", api_delete), ("page", page_delete), ("cli", cli_delete)]
        )
    ]
    for thread in writers + deleters:
        thread.start()
    for thread in writers:
        thread.join(timeout=SECONDS + 4 * TIMEOUT)
    done.set()
    for thread in deleters:
        thread.join(timeout=4 * TIMEOUT)
    assert not any(t.is_alive() for t in writers + deleters), "a thread did not finish"

    _assert_answers(log)
    _assert_stored(app, log)
    _assert_no_orphans(app)


def _assert_answers(log: Log) -> None:
    """No 5xx but a 503 with Retry-After; deletes succeed, find nothing or are busy."""
    bad = [o for o in log.writes if o.status not in (200, 201, 409, 503)]
    bad += [o for o in log.deletes if o.status not in (204, 303, 404, 503)]
    bad += [o for o in log.writes + log.deletes if o.status == 503 and o.retry_after is None]
    counts: dict[str, dict[int, int]] = {}
    for o in log.writes + log.deletes:
        counts.setdefault(o.kind, {}).setdefault(o.status, 0)
        counts[o.kind][o.status] += 1
    assert not bad, (counts, [(o.kind, o.cid, o.status, o.detail) for o in bad[:10]])
    print("answers:", counts)
    assert sum(o.status in (200, 201) for o in log.writes) > 20, counts
    assert sum(o.status in (204, 303) for o in log.deletes) > 3, counts


def _assert_stored(app, log: Log) -> None:
    """Every acknowledged write is where it was sent unless a delete of that conversation
    overlapped it or came later; gone if a delete started after it was acknowledged."""
    where: dict[str, set[str]] = {"turn": set(), "round": set(), "otlp": set()}
    for kind, sql in (
        (
            "turn",
            "SELECT m.external_id, c.external_id FROM message m "
            "JOIN conversation c ON c.id = m.conversation_id",
        ),
        (
            "round",
            "SELECT t.external_tool_call_id, c.external_id FROM tool_invocation t "
            "JOIN message m ON m.id = t.message_id JOIN conversation c ON c.id = m.conversation_id",
        ),
        (
            "otlp",
            "SELECT DISTINCT tt.trace_id, c.external_id FROM otel_turn_trace tt "
            "JOIN otel_turn t ON t.id = tt.turn_id JOIN conversation c ON c.id = t.conversation_id",
        ),
    ):
        where[kind] = {f"{key}@{cid}" for key, cid in raw_rows(app, sql)}
    spans = {trace for (trace,) in raw_rows(app, "SELECT DISTINCT trace_id FROM otel_span")}
    deleted: dict[str, list[Outcome]] = {}
    for o in log.deletes:
        if o.status in (204, 303):
            deleted.setdefault(o.cid, []).append(o)
    lost, resurrected, refused_but_stored = [], [], []
    for w in log.writes:
        present = f"{w.key}@{w.cid}" in where[w.kind]
        stored_anywhere = present or any(k.startswith(f"{w.key}@") for k in where[w.kind])
        if w.kind == "otlp":
            stored_anywhere = stored_anywhere or w.key in spans
        if w.status not in (200, 201):
            if stored_anywhere:
                refused_but_stored.append(w)
            continue
        deletes = deleted.get(w.cid, [])
        if all(d.answered < w.sent for d in deletes) and not present:
            lost.append(w)
        if any(d.sent > w.answered for d in deletes) and stored_anywhere:
            resurrected.append(w)
    assert not lost, [(w.kind, w.cid, w.key) for w in lost[:10]]
    assert not resurrected, [(w.kind, w.cid, w.key) for w in resurrected[:10]]
    assert not refused_but_stored, [(w.kind, w.cid, w.key, w.status) for w in refused_but_stored]


ORPHANS = {
    # Raw OTLP rows whose trace feeds no turn: every export here makes one.
    "otel_span": "SELECT count(*) FROM otel_span s WHERE NOT EXISTS (SELECT 1 FROM otel_turn_trace"
    " tt WHERE tt.project_id = s.project_id AND tt.trace_id = s.trace_id)",
    "otel_log": "SELECT count(*) FROM otel_log s WHERE NOT EXISTS (SELECT 1 FROM otel_turn_trace"
    " tt WHERE tt.project_id = s.project_id AND tt.trace_id = s.trace_id)",
    "otel_link": "SELECT count(*) FROM otel_link s WHERE NOT EXISTS (SELECT 1 FROM otel_turn_trace"
    " tt WHERE tt.project_id = s.project_id AND tt.trace_id = s.trace_id)",
    # A turn's trace with no raw span left (its arguments and results gone from under it).
    "otel_turn_trace": "SELECT count(*) FROM otel_turn_trace tt WHERE NOT EXISTS (SELECT 1 FROM"
    " otel_span s WHERE s.project_id = tt.project_id AND s.trace_id = tt.trace_id)",
    # A turn's messages (no foreign key) gone or in another conversation.
    "otel_turn": "SELECT count(*) FROM otel_turn t WHERE NOT EXISTS (SELECT 1 FROM message m"
    " WHERE m.id = t.assistant_message_id AND m.conversation_id = t.conversation_id) OR"
    " (t.user_message_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM message m"
    " WHERE m.id = t.user_message_id AND m.conversation_id = t.conversation_id))",
    "message": "SELECT count(*) FROM message WHERE conversation_id IS NULL",
    # A conversation re-created by a write that was then refused.
    "conversation": "SELECT count(*) FROM conversation c WHERE NOT EXISTS (SELECT 1 FROM"
    " message m WHERE m.conversation_id = c.id)",
}


def _assert_no_orphans(app) -> None:
    found = {table: raw_rows(app, sql)[0][0] for table, sql in ORPHANS.items()}
    assert found == dict.fromkeys(ORPHANS, 0), found


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_delete_landing_inside_an_export_does_not_bring_back_what_it_deleted(
    app, client, project_key, monkeypatch
):
    """An export into a conversation that a delete removes between the export's check of what
    it read and its insert: the delete waits for the export (which holds the conversation), and
    then takes both traces. Before, the delete went first and the export re-created the
    conversation from its stale plan: the first trace's turn came back, without its spans."""
    from webapp.ingest import delete_conversation
    from webapp.ingest.otlp import store
    from webapp.ingest.transaction import Write, run_write

    headers = {"Content-Type": "application/json", **project_key.headers}
    first = agent_run(1, conversation="gone")
    response = client.post("/v1/traces", data=traces_json(first.spans), headers=headers)
    assert response.status_code == 200, response.data[:300]
    (row_id,) = raw_rows(app, "SELECT id FROM conversation WHERE external_id = 'gone'")[0]

    deleted: list[bool] = []

    def delete() -> None:
        with app.app_context():
            deleted.append(run_write(Write(delete_conversation, (project_key.project_id, row_id))))

    fingerprint, calls, deleter = store._fingerprint, [], threading.Thread(target=delete)

    def fingerprint_then_delete(project_id: int, traces: Any) -> Any:
        result = fingerprint(project_id, traces)
        calls.append(traces)
        if len(calls) == 2:  # the write's check (the first call is the prepare step's)
            deleter.start()
            deleter.join(timeout=3)  # done at once unless the export holds the conversation
        return result

    monkeypatch.setattr(store, "_fingerprint", fingerprint_then_delete)
    second = agent_run(2, conversation="gone")
    response = client.post("/v1/traces", data=traces_json(second.spans), headers=headers)
    assert response.status_code == 200, response.data[:300]
    deleter.join(timeout=TIMEOUT)
    assert deleted == [True]
    left = {
        table: raw_rows(app, f"SELECT count(*) FROM {table}")[0][0]
        for table in ("conversation", "message", "otel_turn", "otel_turn_trace", "otel_span")
    }
    assert left == dict.fromkeys(left, 0)
