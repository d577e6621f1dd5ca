"""The calls explorer: /calls, its JSON twin and GET /api/v1/calls, on SQLite and PostgreSQL —
search in arguments and results, every filter, the statuses against the timeline's badges,
sorts with keyset paging, and a constant number of queries per page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import factories as f
import pytest
from dashboard_support import LOGIN_CHECK, count_get, dashboard_fixture, data, page  # noqa: F401
from sqlalchemy import select

from webapp.db import db
from webapp.models import ToolInvocation
from webapp.queries.records import CallRecord
from webapp.views.conversations.badges import call_badges

NOW = datetime.now(UTC)


def world(project_id: int) -> dict[str, int]:
    """Two conversations in two channels, calls of every status, varied durations and sizes."""
    old = NOW - timedelta(days=3)
    f.channel(project_id, "billing", freshness_seconds=3600)
    a = f.conversation(project_id, "support/42", title="Refund", channel_name="support-bot", at=old)
    b = f.conversation(project_id, "billing-7", channel_name="billing", at=old)
    a1 = f.message(a, "a1", "assistant", "Done.", at=old, status="completed")
    f.calls(
        a1,
        0,
        [
            f.Call(
                "fetch_invoice",
                {"invoice": "INV-1", "note": "retry"},
                "Error: upstream timeout after 30s (gateway)",
                is_error=True,
                started_ms=0,
                duration_ms=30_000,
            ),
            f.Call(
                "search_kb", {"query": "refund policy"}, "x" * 5000, started_ms=0, duration_ms=120
            ),
            f.Call(
                "get_customer",
                {"email": "[redacted]"},
                '{"tier": "gold"}',
                redactions=["mask-pii"],
                started_ms=10,
                duration_ms=40,
            ),
        ],
        at=old,
    )
    b1 = f.message(b, "b1", "assistant", None, at=NOW - timedelta(minutes=1), status="in_progress")
    f.calls(
        b1,
        0,
        [
            f.Call("fetch_invoice", {"invoice": "INV-2"}, None),
            f.Call("search_kb", {"query": "timeout upstream"}, "ok", started_ms=0, duration_ms=5),
        ],
        at=NOW - timedelta(minutes=1),
    )
    return {"a": a.id, "b": b.id}


def ids_by_name(app) -> dict[str, list[int]]:
    with app.app_context():
        rows = db.session.execute(
            select(ToolInvocation.function_name, ToolInvocation.id).order_by(ToolInvocation.id)
        ).all()
    out: dict[str, list[int]] = {}
    for name, call_id in rows:
        out.setdefault(name, []).append(call_id)
    return out


def listing(client, **args: Any) -> dict[str, Any]:
    response = client.get("/calls.json", query_string=args)
    assert response.status_code == 200, response.data[:500]
    return response.get_json()


def names(body: dict[str, Any]) -> list[str]:
    return [row["function_name"] for row in body["data"]]


def test_search_finds_the_failed_call_by_its_error_text(app, dashboard, project_key):
    with data(app):
        world(project_key.project_id)
    body = listing(dashboard, q="upstream timeout")
    # Every word, any order, arguments or result: the failure and the search for those words.
    assert sorted(names(body)) == ["fetch_invoice", "search_kb"]
    assert listing(dashboard, q="UPSTREAM gateway")["data"][0]["statuses"] == ["error", "stale"]
    assert names(listing(dashboard, q="upstream timeout", status="error")) == ["fetch_invoice"]
    assert names(listing(dashboard, q="INV-2")) == ["fetch_invoice"]  # argument values
    assert names(listing(dashboard, q="invoice INV 1")) == ["fetch_invoice"]  # keys too
    assert listing(dashboard, q="timeou")["data"] == []  # whole words
    assert listing(dashboard, q="!!!")["data"] == []  # no word: nothing
    assert names(listing(dashboard, q="gold")) == ["get_customer"]


def test_filters(app, dashboard, project_key):
    with data(app):
        world(project_key.project_id)
    assert names(listing(dashboard, tool="search_kb")) == ["search_kb", "search_kb"]
    assert sorted(names(listing(dashboard, channel="billing"))) == ["fetch_invoice", "search_kb"]
    assert set(names(listing(dashboard, min_ms=100))) == {"fetch_invoice", "search_kb"}
    assert names(listing(dashboard, min_ms=100, max_ms=1000)) == ["search_kb"]
    assert names(listing(dashboard, min_bytes=1000)) == ["search_kb"]
    assert set(names(listing(dashboard, max_bytes=20))) == {"get_customer", "search_kb"}
    # Bounds beyond the 32-bit size column (schemathesis found a 500 on PostgreSQL).
    assert len(listing(dashboard, max_bytes=571_679_583_920)["data"]) == len(
        listing(dashboard, min_bytes=0)["data"]
    )
    assert listing(dashboard, min_bytes=2**40)["data"] == []
    # A range whose low end is above its high end is empty, not an error (issue 22).
    assert listing(dashboard, min_bytes=1000, max_bytes=20)["data"] == []
    recent = (NOW - timedelta(hours=1)).isoformat()
    assert sorted(names(listing(dashboard, **{"from": recent}))) == ["fetch_invoice", "search_kb"]
    day = (NOW - timedelta(days=3)).date().isoformat()
    assert len(listing(dashboard, to=day)["data"]) == 3  # a day as `to` includes the day
    assert names(listing(dashboard, status="no-response")) == ["fetch_invoice"]
    assert names(listing(dashboard, status="redacted")) == ["get_customer"]
    # The support-bot channel has no window of its own: the project's 300 s applies.
    stale = set(names(listing(dashboard, status="stale")))
    assert stale == {"fetch_invoice", "search_kb", "get_customer"}


def test_statuses_are_the_timeline_badges(app, dashboard, project_key):
    app.config["REPLAY_RESULT_TOKEN_CAP"] = 100
    with data(app):
        world(project_key.project_id)
    truncated = listing(dashboard, status="truncated")
    assert names(truncated) == ["search_kb"]
    with app.app_context():
        calls = db.session.scalars(select(ToolInvocation)).all()
        expected = {}
        for c in calls:
            record = CallRecord(
                id=c.id,
                message_id=c.message_id,
                round_index=c.round_index,
                sequence_index=c.sequence_index,
                external_tool_call_id=c.external_tool_call_id,
                function_name=c.function_name,
                arguments=c.arguments,
                created_at=c.created_at,
                started_at=c.started_at,
                ended_at=c.ended_at,
                has_response=c.response is not None,
                response_created_at=c.response_created_at,
                is_error=c.is_error,
                redactions=tuple(c.redactions or ()),
                arguments_tokens=c.arguments_tokens,
                response_tokens=c.response_tokens,
                response_bytes=c.response_bytes,
            )
            expected[c.id] = record
    rows = {row["id"]: row["statuses"] for row in listing(dashboard)["data"]}
    windows = {row["id"]: row["conversation"]["channel"] for row in listing(dashboard)["data"]}
    for call_id, record in expected.items():
        seconds = 3600 if windows[call_id] == "billing" else 300
        badges = call_badges(
            record, now=datetime.now(UTC), freshness_seconds=seconds, token_cap=100, cited=None
        )
        assert rows[call_id] == [b.kind for b in badges], record.function_name
    for kind in ("error", "no-response", "stale", "redacted", "truncated"):
        filtered = listing(dashboard, status=kind)["data"]
        assert filtered and all(kind in row["statuses"] for row in filtered), kind
        assert {r["id"] for r in filtered} == {i for i, s in rows.items() if kind in s}


@pytest.mark.parametrize(
    ("sort", "order"),
    [
        ("time", "desc"),
        ("time", "asc"),
        ("duration", "desc"),
        ("duration", "asc"),
        ("size", "desc"),
        ("size", "asc"),
    ],
)
def test_sorts_page_by_keyset_without_gaps_or_repeats(app, dashboard, project_key, sort, order):
    with data(app):
        conv = f.conversation(project_key.project_id, "many")
        at = NOW - timedelta(hours=2)
        for n in range(7):
            msg = f.message(conv, f"m{n}", "assistant", None, at=at + timedelta(seconds=n % 3))
            f.calls(
                msg,
                0,
                [
                    f.Call(
                        "t",
                        {"n": n},
                        "r" * (n % 4) if n % 5 else None,
                        started_ms=0 if n % 2 else None,
                        duration_ms=float(n % 3 * 10),
                    )
                    for _ in range(3)
                ],
                at=at + timedelta(seconds=n % 3),
            )
    everything = listing(dashboard, sort=sort, order=order, limit=200)["data"]
    assert len(everything) == 21
    seen, cursor = [], None
    while True:
        args = {"sort": sort, "order": order, "limit": 4}
        if cursor:
            args["cursor"] = cursor
        body = listing(dashboard, **args)
        seen += [row["id"] for row in body["data"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert seen == [row["id"] for row in everything]
    key = {"time": "created_at", "duration": "duration_ms", "size": "result_bytes"}[sort]
    values = [(-1 if row[key] is None else row[key]) for row in everything]
    assert values == sorted(values, reverse=order == "desc")


def test_a_cursor_of_another_sort_is_refused(app, dashboard, project_key):
    with data(app):
        world(project_key.project_id)
    cursor = listing(dashboard, limit=1)["next_cursor"]
    response = dashboard.get("/calls.json", query_string={"sort": "size", "cursor": cursor})
    assert response.status_code == 422
    assert response.get_json()["error"]["details"][0]["field"] == "cursor"
    for bad in (
        {"status": "weird"},
        {"min_ms": "x"},
        {"from": "yesterday"},
        {"sort": "name"},
        {"q": "a\x00b"},
    ):
        assert dashboard.get("/calls.json", query_string=bad).status_code == 422, bad
    assert dashboard.get("/calls", query_string={"status": "weird"}).status_code == 422


def test_the_page_links_each_call_to_its_place_in_the_conversation(app, dashboard, project_key):
    with data(app):
        convs = world(project_key.project_id)
    ids = ids_by_name(app)
    doc = page(dashboard.get("/calls?q=upstream+timeout&status=error"))
    assert doc.one("nav.nav a[aria-current=page]").text == "Calls"
    rows = doc.select("#call-rows tr.call-row")
    assert len(rows) == 1
    failed = ids["fetch_invoice"][0]
    link = rows[0].one(".call-conv a")
    assert link.get("href") == f"/conversations/{convs['a']}#call-{failed}"
    assert rows[0].one(".call-tool a").get("href") == f"/calls/{failed}"
    assert [b.text for b in rows[0].select(".badge")] == ["error", "stale now"]
    assert "upstream timeout" in rows[0].one(".call-preview").text
    assert doc.one("#calls-q").get("value") == "upstream timeout"
    # The conversation page holds that anchor.
    conversation = page(dashboard.get(f"/conversations/{convs['a']}"))
    assert conversation.select(f"#call-{failed}")


def test_the_fragment_and_an_empty_result(app, dashboard, project_key):
    with data(app):
        world(project_key.project_id)
    response = dashboard.get("/calls?q=nothing+like+this", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert response.headers["HX-Push-Url"] == "/calls?q=nothing+like+this"
    doc = page(response)
    assert not doc.select("html")
    assert "No call matches" in doc.one(".empty-row").text


def test_queries_per_page_stay_constant(app, dashboard, project_key, count_queries):
    with data(app):
        world(project_key.project_id)
    small = {
        url: count_get(dashboard, count_queries, url)[0]
        for url in ("/calls", "/calls.json", "/calls.json?q=timeout&sort=size")
    }
    with data(app):
        conv = f.conversation(project_key.project_id, "big")
        for n in range(40):
            msg = f.message(conv, f"big{n}", "assistant", None, at=NOW - timedelta(minutes=n))
            f.calls(
                msg,
                0,
                [f.Call("t", {"n": n}, "timeout") for _ in range(5)],
                at=NOW - timedelta(minutes=n),
            )
    for url, count in small.items():
        again, response = count_get(dashboard, count_queries, url)
        assert response.status_code == 200
        # The small world's calls fit on the first page, which is then its own total: the
        # capped COUNT comes with a second page.
        assert again == count + (url == "/calls"), url
    # The page: login check, project, the page of calls, the total (none while one page holds
    # every call), channels and tools for the filters, the project switcher.
    assert small["/calls"] <= LOGIN_CHECK + 5
    assert small["/calls.json"] <= LOGIN_CHECK + 2


def test_the_api_lists_the_same_calls_with_both_conversation_ids(
    app, client, project_key, other_project_key
):
    with data(app):
        world(project_key.project_id)
        world(other_project_key.project_id)
    response = client.get(
        "/api/v1/calls?q=upstream%20timeout&status=error", headers=project_key.headers
    )
    assert response.status_code == 200
    body = response.get_json()
    assert len(body["data"]) == 1
    call = body["data"][0]
    assert call["object"] == "tool_call"
    assert call["conversation"]["id"] == "support/42"
    assert isinstance(call["conversation"]["row_id"], int)
    assert call["url"].endswith(
        f"/conversations/{call['conversation']['row_id']}#call-{call['id']}"
    )
    assert call["statuses"] == ["error", "stale"] and call["is_error"]
    everything = client.get("/api/v1/calls?limit=2", headers=project_key.headers).get_json()
    assert len(everything["data"]) == 2 and everything["has_more"]
    rest = client.get(
        f"/api/v1/calls?limit=50&cursor={everything['next_cursor']}", headers=project_key.headers
    ).get_json()
    assert len(rest["data"]) == 3 and not rest["has_more"]
    bad = client.get("/api/v1/calls?max_bytes=-1", headers=project_key.headers)
    assert bad.status_code == 422
    assert client.get("/api/v1/calls").status_code == 401
    # Bounds at the calendar's edges bound nothing rather than overflow into a 500.
    for edge in ("to=9999-12-31", "to=9999-12-31T23:59:59-05:00"):
        edged = client.get(f"/api/v1/calls?limit=50&{edge}", headers=project_key.headers)
        assert edged.status_code == 200, edge
        assert len(edged.get_json()["data"]) == 5, edge


@pytest.mark.parametrize("selective", [100_000, 0])
def test_every_search_strategy_finds_the_same_calls(
    app, dashboard, project_key, monkeypatch, selective
):
    """SQLite reads a selective search from the index and checks a word of most calls row by
    row (or as a set, with other filters): the answers are the same."""
    from webapp.queries import call_explorer

    with data(app):
        world(project_key.project_id)
    monkeypatch.setattr(call_explorer, "SELECTIVE_MATCHES", selective)
    assert sorted(names(listing(dashboard, q="upstream timeout"))) == ["fetch_invoice", "search_kb"]
    assert names(listing(dashboard, q="upstream timeout", status="error")) == ["fetch_invoice"]
    assert names(listing(dashboard, q="timeout", sort="size", order="asc")) == [
        "search_kb",
        "fetch_invoice",
    ]
    first = listing(dashboard, q="timeout", limit=1)
    second = listing(dashboard, q="timeout", limit=1, cursor=first["next_cursor"])
    assert {first["data"][0]["id"], second["data"][0]["id"]} == {
        row["id"] for row in listing(dashboard, q="timeout")["data"]
    }


def test_the_twin_names_each_field_as_the_api_does(app, client, dashboard, project_key):
    """One vocabulary: `/calls.json` items are `GET /api/v1/calls` items (docs/api.md), not the
    query's rows (`external_tool_call_id`, `response_bytes`, a message row id...)."""
    with data(app):
        world(project_key.project_id)
    api = client.get("/api/v1/calls?limit=200", headers=project_key.headers).get_json()["data"]
    twin = listing(dashboard, limit=200)["data"]
    assert twin == api
    assert {"tool_call_id", "result_bytes", "result_tokens", "has_result"} <= set(twin[0])


def test_the_api_and_the_twin_list_the_same_calls_in_constant_queries(
    app, client, dashboard, project_key, count_queries
):
    with data(app):
        world(project_key.project_id)
    url = "/api/v1/calls?q=timeout&sort=duration"

    def api_count() -> int:
        client.get(url, headers=project_key.headers)
        with count_queries() as counter:
            response = client.get(url, headers=project_key.headers)
        assert response.status_code == 200
        return counter.count

    before = api_count()
    with data(app):
        conv = f.conversation(project_key.project_id, "more")
        for n in range(30):
            msg = f.message(conv, f"more{n}", "assistant", None, at=NOW - timedelta(minutes=n))
            f.calls(
                msg,
                0,
                [f.Call("t", {"n": n}, "timeout") for _ in range(3)],
                at=NOW - timedelta(minutes=n),
            )
    assert api_count() == before
    api_ids = [c["id"] for c in client.get(url, headers=project_key.headers).get_json()["data"]]
    twin = dashboard.get("/calls.json?q=timeout&sort=duration").get_json()["data"]
    assert api_ids == [c["id"] for c in twin]


def test_durations_are_exact_so_ties_sort_by_id_and_bounds_are_inclusive(
    app, dashboard, project_key
):
    """On SQLite a duration once came from two julianday() doubles: a 30,000 ms call read as
    29,999.99997 or 30,000.00003 depending on the instant it started, so `min_ms=30000` could
    drop it and two 30 s calls sorted by noise. Start instants here carry microseconds, some
    just below a whole second (where rounding to the millisecond carries into the seconds)."""
    durations = [30_000, 30_000, 30_000, 0.544, 999.999, 1_000, 86_400_000, 0.001]
    starts = [
        datetime(2026, 11, 24, 1, 2, 3, 999_600, tzinfo=UTC),
        datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 6, 30, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2024, 2, 29, 12, 0, 0, 500_000, tzinfo=UTC),
    ]
    expected: dict[int, float] = {}
    with data(app):
        conv = f.conversation(project_key.project_id, "timing")
        for n, (duration, at) in enumerate(
            (d, starts[(i + j) % len(starts)])
            for i, d in enumerate(durations)
            for j in range(2)
        ):
            msg = f.message(conv, f"m{n}", "assistant", None, at=at)
            (call,) = f.calls(
                msg,
                0,
                [f.Call("t", {"n": n}, "ok", started_ms=0, duration_ms=duration)],
                at=at,
            )
            expected[call.id] = (call.ended_at - call.started_at) / timedelta(milliseconds=1)
    rows = listing(dashboard, sort="duration", order="desc", limit=200)["data"]
    got = {row["id"]: row["duration_ms"] for row in rows}
    assert got == pytest.approx(expected, abs=1e-9)
    # Equal durations are equal numbers, so the sort breaks their tie by id, newest first.
    order = [(-got[i], -i) for i in (row["id"] for row in rows)]
    assert order == sorted(order)
    exact = listing(dashboard, min_ms=30_000, max_ms=30_000, limit=200)["data"]
    assert sorted(row["id"] for row in exact) == sorted(
        i for i, ms in expected.items() if ms == 30_000
    )
    assert len(exact) == 6
