"""The tools page: per-function statistics, sorting, drill-down to the conversations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import factories as f
from dashboard_support import dashboard_fixture, data, page  # noqa: F401
from sqlalchemy import update

from webapp.db import db
from webapp.models import ToolInvocation


def latency_conversation(project_id: int, external_id: str, durations: list[float]) -> None:
    now = datetime.now(UTC)
    conv = f.conversation(project_id, external_id, title=f"Uses fetch ({external_id})")
    msg = f.message(conv, f"{external_id}-a", "assistant", "ok", at=now, status="completed")
    f.calls(
        msg,
        0,
        [
            f.Call("fetch", {"i": i}, "x" * 100, is_error=i == 0, started_ms=0, duration_ms=d)
            for i, d in enumerate(durations)
        ],
        at=now,
    )


def test_tool_statistics_with_percentiles(app, dashboard, project_key):
    # 20 timed calls of 10..200 ms: nearest-rank p50 = 100 ms, p95 = 190 ms.
    with data(app):
        latency_conversation(project_key.project_id, "a", [10.0 * i for i in range(1, 11)])
        latency_conversation(project_key.project_id, "b", [10.0 * i for i in range(11, 21)])
        f.simple_conversation(project_key.project_id, "c")
    body = dashboard.get("/tools.json").get_json()
    fetch = next(t for t in body["data"] if t["function_name"] == "fetch")
    assert fetch["calls"] == 20 and fetch["errors"] == 2
    assert fetch["p50_ms"] == 100.0 and fetch["p95_ms"] == 190.0 and fetch["timed_calls"] == 20
    assert fetch["avg_response_bytes"] == 100.0 and fetch["avg_response_tokens"] == 25.0
    doc = page(dashboard.get("/tools"))
    row = next(r for r in doc.select("tbody tr") if r.one("a").text == "fetch")
    cells = [c.text.strip() for c in row.select("td")]
    assert cells[1:8] == ["20", "10.0% (2)", "0", "100 ms", "190 ms", "100 B", "25"]


def test_tools_sort_and_bad_sort(app, dashboard, project_key):
    with data(app):
        latency_conversation(project_key.project_id, "a", [5.0, 6.0])
        f.simple_conversation(project_key.project_id, "c", n_calls=5)
    by_calls = [t["function_name"] for t in dashboard.get("/tools.json").get_json()["data"]]
    assert by_calls == ["lookup", "fetch"]
    doc = page(dashboard.get("/tools?sort=errors"))
    assert [r.one("a").text for r in doc.select("tbody tr")] == ["fetch", "lookup"]
    assert doc.one("th[aria-sort]").text.strip().startswith("Error rate")
    assert dashboard.get("/tools?sort=nope").status_code == 422


def test_drill_down_lists_the_conversations_that_used_the_tool(app, dashboard, project_key):
    now = datetime.now(UTC)
    with data(app):
        latency_conversation(project_key.project_id, "a", [5.0])
        latency_conversation(project_key.project_id, "b", [5.0, 7.0])
        f.simple_conversation(project_key.project_id, "other", at=now - timedelta(hours=1))
    doc = page(dashboard.get("/tools/usage", query_string={"name": "fetch"}))
    assert doc.one("h1").text == "fetch"
    rows = doc.select("tbody tr")
    assert sorted(r.select("td")[1].text for r in rows) == ["1", "2"]
    assert all("Uses fetch" in r.one("a").text for r in rows)
    body = dashboard.get("/tools/usage.json?name=fetch").get_json()
    assert body["stats"]["calls"] == 3 and len(body["conversations"]) == 2
    assert dashboard.get("/tools/usage?name=unknown").status_code == 404
    assert dashboard.get("/tools/usage").status_code == 422


def test_drill_down_pages_by_last_use(app, dashboard, project_key):
    with data(app):
        for i in range(55):
            latency_conversation(project_key.project_id, f"c{i}", [1.0])
    first = dashboard.get("/tools/usage.json?name=fetch").get_json()
    assert len(first["conversations"]) == 50 and first["has_more"]
    rest = dashboard.get(f"/tools/usage.json?name=fetch&cursor={first['next_cursor']}").get_json()
    ids = {c["conversation_id"] for c in first["conversations"] + rest["conversations"]}
    assert len(ids) == 55 and not rest["has_more"]


def test_tool_names_are_text_and_urls_are_encoded(app, dashboard, project_key):
    name = "a/b?c=<d>&e#f"
    with data(app):
        conv = f.conversation(project_key.project_id, "weird")
        msg = f.message(conv, "m", "assistant", "ok", at=datetime.now(UTC), status="completed")
        f.calls(msg, 0, [f.Call(name, {}, "r")], at=datetime.now(UTC))
    doc = page(dashboard.get("/tools"))
    link = doc.one("tbody a")
    assert link.text == name
    drill = page(dashboard.get(link.get("href")))
    assert drill.one("h1").text == name


def test_error_rates_are_red_only_from_the_alert_threshold(app, dashboard, project_key):
    # tool_0: 1 error in 200 calls (0.5%, amber); tool_1: none (plain, never red).
    with data(app):
        f.big_conversation(project_key.project_id, "rates", turns=1, rounds=200, parallel=2)
        T = ToolInvocation
        db.session.execute(update(T).values(is_error=False))
        db.session.execute(
            update(T).where(T.function_name == "tool_0", T.round_index == 7).values(is_error=True)
        )
    doc = page(dashboard.get("/tools"))
    cells = {
        row.select("td")[0].text.strip(): row.select("td") for row in doc.select("tbody tr")
    }
    rate_cell = next(c for c in cells["tool_0"] if "(1)" in c.text)
    assert rate_cell.select("span")[0].get("class") == "text-warn"
    assert "0.5%" in rate_cell.text
    assert not any(c.select(".text-error") for c in cells["tool_1"])


def test_drill_down_walks_only_the_tools_recent_calls(app, dashboard, project_key, monkeypatch):
    """The conversations are found among the tool's most recent calls (issue 24: grouping every
    call of the tool grew with them), page after page; each one's calls are all counted."""
    from webapp.queries import tool_stats

    # The big conversation's 4 calls are made at one instant: a walk of 5 gets past them.
    monkeypatch.setattr(tool_stats, "RECENT_CALLS", 5)
    with data(app):
        for i in range(6):
            latency_conversation(project_key.project_id, f"c{i}", [1.0])
        latency_conversation(project_key.project_id, "big", [1.0, 2.0, 3.0, 4.0])
    seen: list[dict] = []
    url = "/tools/usage.json?name=fetch"
    for _ in range(20):
        body = dashboard.get(url).get_json()
        seen += body["conversations"]
        if not body["has_more"]:
            break
        url = f"/tools/usage.json?name=fetch&cursor={body['next_cursor']}"
    assert len(seen) == len({c["conversation_id"] for c in seen}) == 7
    big = next(c for c in seen if c["external_id"] == "big")
    assert (big["calls"], big["errors"]) == (4, 1)
    assert [c["last_used"] for c in seen] == sorted((c["last_used"] for c in seen), reverse=True)


def test_drill_down_reads_calls_by_index(app, project_key):
    """The conversations' query walks the tool's index and the chosen conversations' messages:
    no full scan of tool_invocation, on either database."""
    from sqlalchemy import event

    from webapp.queries.tool_stats import conversations_using

    with data(app):
        latency_conversation(project_key.project_id, "a", [1.0, 2.0])
    with app.app_context():
        sent: list[tuple[str, object]] = []

        def capture(_conn, _cursor, statement, parameters, *_):
            sent.append((statement, parameters))

        event.listen(db.engine, "before_cursor_execute", capture)
        try:
            for after in (None, (datetime.now(UTC), 1)):
                conversations_using(project_key.project_id, "fetch", after, 50)
        finally:
            event.remove(db.engine, "before_cursor_execute", capture)
        connection = db.session.connection()
        postgresql = connection.dialect.name == "postgresql"
        if postgresql:
            connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
        for statement, parameters in sent:
            prefix = "EXPLAIN " if postgresql else "EXPLAIN QUERY PLAN "
            plan = "\n".join(
                str(row[-1]) for row in connection.exec_driver_sql(prefix + statement, parameters)
            )
            assert "Seq Scan on tool_invocation" not in plan, plan
            assert not [
                line for line in plan.splitlines() if line.strip() == "SCAN tool_invocation"
            ], plan
        db.session.rollback()
