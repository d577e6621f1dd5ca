"""Every filter and sort of the calls explorer reads `tool_invocation` through an index on both
databases, and the duration and size sorts walk their own index in order (issue 24, item 2):
at 1M calls `sort=duration` sorted every call of the project (13 s), and a rare word searched
on PostgreSQL walked the project's calls in time order checking each (2.8 s warm).

SQLite: EXPLAIN QUERY PLAN of the page's query has no "SCAN tool_invocation" without an index.
PostgreSQL: EXPLAIN (FORMAT JSON) with sequential scans disabled (a tiny table would be read
whole, rightly) has no Seq Scan of tool_invocation."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, insert, text

from webapp.auth import get_or_create_project
from webapp.db import db
from webapp.models import CALL_FTS, Message, ToolInvocation
from webapp.queries import call_explorer
from webapp.queries.call_explorer import STATUSES, list_calls, parse_filters

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
FILTERS: list[dict[str, str]] = [
    {},
    {"q": "refund"},
    {"q": "refund policy"},
    {"tool": "search"},
    *({"status": status} for status in STATUSES),
    {"channel": "support"},
    {"min_ms": "10"},
    {"max_ms": "5000"},
    {"min_ms": "10", "max_ms": "5000"},
    {"min_bytes": "5"},
    {"max_bytes": "500"},
    {"min_bytes": "5", "max_bytes": "500"},
    {"from": "2026-11-20"},
    {"to": "2026-11-26"},
    {"from": "2026-11-20", "to": "2026-11-26", "tool": "search"},
]
SORTS = [(sort, order) for sort in ("time", "duration", "size") for order in ("desc", "asc")]
# The sort's index is walked in order (no sort of the matches) when nothing else narrows the
# list, or a range of the sort's own key does.
IN_ORDER = {
    "duration": ({}, {"min_ms": "10"}, {"max_ms": "5000"}, {"min_ms": "10", "max_ms": "5000"}),
    "size": ({}, {"min_bytes": "5"}, {"max_bytes": "500"}, {"min_bytes": "5", "max_bytes": "500"}),
}
SORT_INDEX = {"duration": "ix_tool_invocation_duration", "size": "ix_tool_invocation_size"}
START = {"time": NOW, "duration": 100.0, "size": 100}


def _calls(project_id: int) -> None:
    message = db.session.execute(
        insert(Message).returning(Message.id),
        {"project_id": project_id, "external_id": "m1", "created_at": NOW},
    ).scalar_one()
    db.session.execute(
        insert(ToolInvocation),
        [
            {
                "project_id": project_id,
                "message_id": message,
                "round_index": 0,
                "sequence_index": n,
                "function_name": "search" if n % 2 else "fetch",
                "arguments": {"query": "refund policy" if n % 3 else "shipping"},
                "response": "ok " * n,
                "response_bytes": 3 * n,
                "created_at": NOW - timedelta(days=n),
                "started_at": NOW - timedelta(days=n),
                "ended_at": NOW - timedelta(days=n) + timedelta(milliseconds=40 * n),
            }
            for n in range(12)
        ],
    )
    db.session.commit()


def _page_statement(project_id: int, args: dict[str, str], after: Any) -> tuple[str, Any]:
    """The SQL and parameters of the page's query (the last one list_calls sends)."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", capture)
    try:
        list_calls(project_id, parse_filters(args), now=NOW, token_cap=1000, after=after)
    finally:
        event.remove(db.engine, "before_cursor_execute", capture)
    return sent[-1]


def _plan(statement: str, parameters: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """SQLite: the plan's lines. PostgreSQL: its nodes (sequential scans and sorts disabled)."""
    connection = db.session.connection()
    if connection.dialect.name == "sqlite":
        rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
        # The page's ids are the subquery "page": its lines are marked (the outer query sorts
        # the page's rows, a sort it may do).
        inner: set[int] = set()
        for node, parent, _, detail in rows:
            if detail.startswith(("MATERIALIZE page", "CO-ROUTINE page")) or parent in inner:
                inner.add(node)
        return [("page: " if parent in inner else "") + d for _, parent, _, d in rows], []
    connection.exec_driver_sql("SET LOCAL enable_seqscan = off")
    # A dozen rows: the planner may sort them rather than walk an index it could walk (seen
    # once in CI, for one sort of twelve). Sorting costs it more here, so a plan that still
    # sorts has no index giving that order.
    connection.exec_driver_sql("SET LOCAL enable_sort = off")
    raw = connection.exec_driver_sql("EXPLAIN (FORMAT JSON) " + statement, parameters).scalar()
    document = raw if isinstance(raw, list) else json.loads(raw)
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", ()):
            walk(child)

    walk(document[0]["Plan"])
    return [], nodes


@pytest.mark.parametrize("selective", [True, False], ids=["rare-words", "common-words"])
def test_every_filter_and_sort_reads_calls_by_index(app, monkeypatch, selective):
    if not selective:
        # Words in more calls than SELECTIVE_MATCHES: found walking the sort's order instead.
        monkeypatch.setattr(call_explorer, "SELECTIVE_MATCHES", 0)
    failures = []
    with app.app_context():
        project_id = get_or_create_project("acme").id
        _calls(project_id)
        for args in FILTERS:
            if not selective and "q" not in args:
                continue
            for sort, order in SORTS:
                for after in (None, (START[sort], 5)):
                    query = {**args, "sort": sort, "order": order}
                    lines, nodes = _plan(*_page_statement(project_id, query, after))
                    db.session.rollback()
                    full = [line for line in lines if re.search(r"\bSCAN tool_invocation$", line)]
                    full += [
                        n
                        for n in nodes
                        if n["Node Type"] == "Seq Scan" and n["Relation Name"] == "tool_invocation"
                    ]
                    if full:
                        failures.append((query, after, "full scan", lines or nodes))
                    if sort in IN_ORDER and args in IN_ORDER[sort]:
                        if any(line.startswith("page: USE TEMP B-TREE") for line in lines):
                            failures.append((query, after, "sorted, not walked", lines))
                        names = {n.get("Index Name") for n in nodes}
                        if nodes and SORT_INDEX[sort] not in names:
                            failures.append((query, after, "not its index", nodes))
    assert failures == [], failures[:3]


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_rare_word_is_read_from_the_search_index_on_postgresql(app):
    """100,000 calls, three with the word, analyzed, sequential scans allowed: the matches come
    from the GIN index, not from walking the project's calls in time order checking each."""
    with app.app_context():
        project_id = get_or_create_project("acme").id
        _calls(project_id)
        db.session.execute(
            text(
                "INSERT INTO tool_invocation (project_id, message_id, round_index, sequence_index, "
                "external_tool_call_id, function_name, arguments, response, is_error, created_at) "
                "SELECT :p, (SELECT min(id) FROM message), 1, g, '', 'search', "
                "jsonb_build_object('q', CASE WHEN g % 30000 = 0 THEN 'zebracorn' "
                "ELSE 'common words' END), 'the result ' || g, false, "
                "now() - g * interval '1 second' FROM generate_series(1, 100000) AS g"
            ),
            {"p": project_id},
        )
        db.session.commit()
        with db.engine.connect() as autocommit:
            autocommit.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                "VACUUM ANALYZE tool_invocation"
            )
        statement, parameters = _page_statement(project_id, {"q": "zebracorn"}, None)
        connection = db.session.connection()
        plan = "\n".join(
            row[0] for row in connection.exec_driver_sql("EXPLAIN " + statement, parameters)
        )
        assert "ix_tool_invocation_search" in plan, plan
        page = list_calls(project_id, parse_filters({"q": "zebracorn"}), now=NOW, token_cap=None)
        assert len(page.rows) == 3


def test_a_later_page_starts_its_walk_at_the_cursor(app):
    """The keyset condition bounds the sort's first column, so the index walk starts at the
    cursor (as an OR alone it was a filter: a deep page read the index from its start)."""
    index = {**SORT_INDEX, "time": "ix_tool_invocation_project_id_created_at_id"}
    failures = []
    with app.app_context():
        project_id = get_or_create_project("acme").id
        _calls(project_id)
        for sort, order in SORTS:
            query = {"sort": sort, "order": order}
            lines, nodes = _plan(*_page_statement(project_id, query, (START[sort], 5)))
            db.session.rollback()
            bound = "<?" if order == "desc" else ">?"
            walks = [line for line in lines if line.startswith("page: SEARCH tool_invocation")]
            if lines and not (walks and bound in walks[0]):
                failures.append((query, lines))
            conditions = [
                n.get("Index Cond", "") for n in nodes if n.get("Index Name") == index[sort]
            ]
            if nodes and not any(("<=" if order == "desc" else ">=") in c for c in conditions):
                failures.append((query, conditions))
    assert failures == [], failures


def _count_statement(project_id: int, args: dict[str, str]) -> tuple[str, Any]:
    """The SQL and parameters of the explorer's capped total."""
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(db.engine, "before_cursor_execute", capture)
    try:
        call_explorer.count_calls(project_id, parse_filters(args), now=NOW, token_cap=1000)
    finally:
        event.remove(db.engine, "before_cursor_execute", capture)
    return sent[-1]


# The statuses with a partial index: their total and page read only the index's calls. A call
# whose content was not captured has no response and a redaction: either index bounds it
# (PostgreSQL's planner may take the redactions').
STATUS_INDEX = {
    "error": ("ix_tool_invocation_error",),
    "no-response": ("ix_tool_invocation_no_response",),
    "not-captured": ("ix_tool_invocation_no_response", "ix_tool_invocation_redacted"),
    "redacted": ("ix_tool_invocation_redacted",),
}


@pytest.mark.parametrize("status", sorted(STATUS_INDEX))
def test_a_rare_status_is_counted_and_listed_from_its_own_index(app, status):
    """`/calls?status=error`'s capped total read every call of the project to find its errors
    (3 % of them: x2.2 from 100k to 1M calls), and a rarer status's page walked every call of
    the project (1.6 s at 1M with none matching): each reads its partial index, newest first
    (issue 24)."""
    with app.app_context():
        project_id = get_or_create_project("acme").id
        _calls(project_id)
        postgresql = db.session.connection().dialect.name == "postgresql"
        if postgresql:
            # PostgreSQL picks among indexes by statistics: 20,000 calls, 3 % errors, 3 %
            # without a response, 3 % redacted, analyzed, sequential scans allowed.
            db.session.execute(
                text(
                    "INSERT INTO tool_invocation (project_id, message_id, round_index, "
                    "sequence_index, external_tool_call_id, function_name, response, is_error, "
                    "redactions, created_at) SELECT :p, (SELECT min(id) FROM message), 1, g, '', "
                    "'search', CASE WHEN g % 33 = 1 THEN NULL ELSE 'ok' END, g % 33 = 0, "
                    "CASE WHEN g % 33 = 2 THEN '[\"api_key\"]'::jsonb END, "
                    "now() - g * interval '1 second' FROM generate_series(1, 20000) AS g"
                ),
                {"p": project_id},
            )
            db.session.commit()
            with db.engine.connect() as autocommit:
                autocommit.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "VACUUM ANALYZE tool_invocation"
                )
        for statement, parameters in (
            _count_statement(project_id, {"status": status}),
            _page_statement(project_id, {"status": status}, None),
        ):
            connection = db.session.connection()
            prefix = "EXPLAIN " if postgresql else "EXPLAIN QUERY PLAN "
            plan = " ".join(
                str(row[-1]) for row in connection.exec_driver_sql(prefix + statement, parameters)
            )
            db.session.rollback()
            assert any(index in plan for index in STATUS_INDEX[status]), plan
            full = r"Seq Scan on tool_invocation|SCAN tool_invocation(?! USING)"
            assert not re.search(full, plan), plan


@pytest.mark.parametrize("args", [{"q": "refund"}, {"q": "refund", "tool": "search"}])
def test_a_searchs_total_stops_at_its_cap(app, args):
    """`/calls?q=`'s capped total of a word in every call grew x3.0 from 100,000 to 1,000,000
    calls (1 s at 5,000,000): SQLite read every match of `id IN (search)` into a temporary set
    before counting 10,001 of them. It starts from the search index's matches and stops at the
    cap: the search is the plan's outer loop, each call looked up by id (issue 24). Both
    databases count the same, up to cap + 1."""
    with app.app_context():
        project_id = get_or_create_project("acme").id
        _calls(project_id)
        other = get_or_create_project("other").id
        _calls(other)  # another project's matches are not counted
        expected = {"q": 8, "tool": 4}["tool" if "tool" in args else "q"]
        filters = parse_filters(args)
        for cap, total in ((100, expected), (2, 3)):
            got = call_explorer.count_calls(project_id, filters, now=NOW, token_cap=1000, cap=cap)
            assert got == total, (cap, got)
        statement, parameters = _count_statement(project_id, args)
        connection = db.session.connection()
        if connection.dialect.name != "sqlite":
            return  # PostgreSQL checks each call of the project under the LIMIT (bounded)
        plan = [
            row[-1]
            for row in connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)
        ]
        scans = [line for line in plan if line.startswith(("SCAN", "SEARCH"))]
        assert scans[0].startswith(f"SCAN {CALL_FTS} VIRTUAL TABLE"), plan
        assert re.match(r"SEARCH tool_invocation USING INTEGER PRIMARY KEY", scans[1]), plan
        assert not any("LIST SUBQUERY" in line for line in plan), plan
