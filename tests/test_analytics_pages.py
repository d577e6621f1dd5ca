"""The analytics pages on both databases: hand-computed numbers end to end, filters, CSV equal to
the JSON twin, constant query counts, project isolation, escaping and the price-override form."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from analytics_data import DAY2, T0, Seeded, seed
from dashboard_support import HTMX, LOGIN_CHECK, csrf_token, data, page
from dashboard_support import dashboard_fixture as dashboard_fixture
from factories import big_conversation, simple_conversation

from webapp.analytics.project_charts import PROJECT_CHARTS
from webapp.db import db
from webapp.models import Project, ServiceCall
from webapp.services import attribution_store
from webapp.views.charts import project_overrides

MARCH = {"from": "2025-03-01", "to": "2025-03-31"}


@pytest.fixture
def seeded(app, project_key) -> Seeded:
    with app.app_context():
        return seed(project_key.project_id)


def get_json(client, url: str, **params) -> dict:
    response = client.get(url, query_string=params)
    assert response.status_code == 200, response.data[:500]
    return response.get_json()


def rows(chart: dict) -> list[dict]:
    return chart["rows"]


def csv_records(response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.data[:500]
    assert response.mimetype == "text/csv"
    return list(csv.DictReader(io.StringIO(response.data.decode())))


def as_csv_text(record: dict) -> dict[str, str]:
    return {k: "" if v is None else str(v) for k, v in record.items()}


# --- the hand-made numbers, end to end --------------------------------------------------------


def test_conversation_charts_hand_computed(dashboard, seeded: Seeded) -> None:
    d = get_json(dashboard, f"/conversations/{seeded.c1}/charts.json")
    assert d["conversation"] == {"id": seeded.c1, "external_id": "c1"}
    assert d["freshness_seconds"] == 300
    context = rows(d["charts"]["context"])
    assert [
        tuple(r[k] for k in ("service_call", "system", "tool_definitions", "user"))
        + tuple(r[k] for k in ("assistant", "tool_results", "total", "reported_input_tokens"))
        for r in context
    ] == [
        ("#1 r0", 6, 19, 5, 0, 0, 30, 120),
        ("#1 r1", 6, 19, 5, 13, 400, 443, 560),
        ("#1 r2", 6, 19, 5, 20, 450, 500, 640),
        ("#2 r0", 6, 19, 9, 28, 450, 512, 700),
        ("#2 r1", 6, 19, 9, 34, 1450, 1518, 1710),
        ("#3 r0", 6, 19, 12, 10, 0, 47, 90),
    ]
    assert "128,000 tokens (genai-prices" in d["charts"]["context"]["notes"][2]
    # $2 per 1M input tokens (the project's override for gpt-4o).
    tools = {r["tool"]: r for r in rows(d["charts"]["tool-cost"])}
    assert Decimal(tools["fetch"]["attributed_cost_usd"]) == Decimal("0.0044")
    assert Decimal(tools["search"]["attributed_cost_usd"]) == Decimal("0.0011")
    assert (tools["fetch"]["resent_input_tokens"], tools["search"]["resent_input_tokens"]) == (
        2200,
        550,
    )
    turns = rows(d["charts"]["turn-cost"])
    assert [(r["turn"], Decimal(r["cost_usd"])) for r in turns] == [
        (1, Decimal("0.00316")),
        (2, Decimal("0.00494")),
        (3, Decimal("0.000196")),
    ]
    results = rows(d["charts"]["result-tokens"])
    assert [(r["tool"], r["tokens"], r["sends"]) for r in results] == [
        ("search", 100, 4),
        ("fetch", 300, 4),
        ("search", 50, 3),
        ("fetch", 1000, 1),
    ]


def test_conversation_options_change_the_replay(dashboard, seeded: Seeded) -> None:
    url = f"/conversations/{seeded.c1}/charts.json"
    off = get_json(dashboard, url, freshness="off", context_budget="1000")
    assert off["options"] == {"freshness": "off", "context_budget": "1000"}
    assert off["freshness_seconds"] is None
    # Without a window a1's and a2's results stay in a3's context: 450 + 1000.
    assert rows(off["charts"]["context"])[-1]["tool_results"] == 1450
    short = get_json(dashboard, url, freshness="10")
    assert rows(short["charts"]["context"])[3]["tool_results"] == 0


def test_costs_json_hand_computed(dashboard, seeded: Seeded) -> None:
    d = get_json(dashboard, "/costs.json", **MARCH)
    assert list(d["charts"]) == list(PROJECT_CHARTS)
    assert d["filters"] == MARCH
    cost = {r["day"]: r for r in rows(d["charts"]["cost"])}
    assert len(cost) == 31
    assert Decimal(cost["2025-03-10"]["cost_usd"]) == Decimal("0.008296")
    assert cost["2025-03-10"]["service_calls"] == 6
    assert (cost["2025-03-12"]["service_calls"], cost["2025-03-12"]["unpriced_calls"]) == (1, 1)
    assert Decimal(cost["2025-03-11"]["cost_usd"]) == 0
    tokens = {r["day"]: r for r in rows(d["charts"]["tokens"])}
    assert tokens["2025-03-10"]["input_tokens"] == 120 + 560 + 640 + 700 + 1710 + 90
    assert tokens["2025-03-10"]["tool_result_tokens"] == 100 + 300 + 50 + 1000
    assert tokens["2025-03-12"]["tool_result_tokens"] == 40
    # c2's search result (40 tokens, sent once more, to a call priced as gpt-4o) adds to c1's.
    tools = {r["tool"]: r for r in rows(d["charts"]["tool-cost"])}
    assert Decimal(tools["search"]["attributed_cost_usd"]) == Decimal("0.00118")
    assert tools["search"]["results"] == 3
    sizes = {r["tool"]: r for r in rows(d["charts"]["result-sizes"])}
    assert sizes["fetch"] == {
        "tool": "fetch",
        "results": 2,
        "mean": 650.0,
        "min": 300,
        "p25": 300,
        "p50": 300,
        "p75": 1000,
        "p90": 1000,
        "max": 1000,
    }
    assert (sizes["search"]["min"], sizes["search"]["p50"], sizes["search"]["max"]) == (40, 50, 100)
    errors = [(r["day"], r["tool"], r["calls"], r["errors"]) for r in rows(d["charts"]["errors"])]
    assert ("2025-03-12", "(all tools)", 2, 1) in errors
    assert ("2025-03-12", "search", 1, 1) in errors


def test_other_projects_never_show(dashboard, seeded: Seeded) -> None:
    text = dashboard.get("/costs.json", query_string=MARCH).data.decode()
    assert "secret_tool" not in text and "9.99" not in text
    for url in (
        f"/conversations/{seeded.other_project_conversation}/charts.json",
        f"/conversations/{seeded.other_project_conversation}/charts/context.csv",
        "/conversations/999999/charts.json",
    ):
        response = dashboard.get(url)
        assert response.status_code == 404
        assert response.get_json()["error"]["code"] == "not_found"
    assert (
        dashboard.get(f"/conversations/{seeded.other_project_conversation}/charts").status_code
        == 404
    )


def test_filters_by_channel_and_tool(dashboard, seeded: Seeded) -> None:
    beta = get_json(dashboard, "/costs.json", channel="beta", **MARCH)
    assert sum(r["service_calls"] for r in rows(beta["charts"]["cost"])) == 1
    assert [r["tool"] for r in rows(beta["charts"]["tool-cost"])] == ["search"]
    fetch = get_json(dashboard, "/costs.json", tool="fetch", **MARCH)
    assert {r["tool"] for r in rows(fetch["charts"]["result-sizes"])} == {"fetch"}
    assert [r["tool"] for r in rows(fetch["charts"]["tool-cost"])] == ["fetch"]
    assert {r["tool"] for r in rows(fetch["charts"]["errors"])} == {"fetch"}
    outside = get_json(dashboard, "/costs.json", **{"from": "2025-04-01", "to": "2025-04-02"})
    assert all(not rows(c) or c["name"] in ("cost", "tokens") for c in outside["charts"].values())
    assert sum(r["service_calls"] for r in rows(outside["charts"]["cost"])) == 0


# --- CSV --------------------------------------------------------------------------------------


@pytest.mark.parametrize("chart", PROJECT_CHARTS)
def test_project_csv_equals_the_json_rows(dashboard, seeded: Seeded, chart: str) -> None:
    d = get_json(dashboard, "/costs.json", **MARCH)
    response = dashboard.get(f"/costs/{chart}.csv", query_string=MARCH)
    assert csv_records(response) == [as_csv_text(r) for r in rows(d["charts"][chart])]
    assert (
        f'filename="toolscope-{chart}-2025-03-01-2025-03-31.csv"'
        in response.headers["Content-Disposition"]
    )


def test_conversation_csv_equals_the_json_rows(dashboard, seeded: Seeded) -> None:
    d = get_json(dashboard, f"/conversations/{seeded.c1}/charts.json", context_budget="500")
    for name, chart in d["charts"].items():
        response = dashboard.get(
            f"/conversations/{seeded.c1}/charts/{name}.csv", query_string={"context_budget": "500"}
        )
        assert csv_records(response) == [as_csv_text(r) for r in rows(chart)], name


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/costs.json?from=soon", "from"),
        ("/costs/cost.csv?from=2025-02-01&to=2025-01-01", "from"),
        ("/conversations/1/charts.json?persistence=never", "persistence"),
        ("/conversations/1/charts.json?context_budget=-5", "context_budget"),
        ("/conversations/1/charts/context.csv?freshness=soon", "freshness"),
    ],
)
def test_bad_arguments_are_422_with_the_field(
    dashboard, seeded: Seeded, url: str, field: str
) -> None:
    response = dashboard.get(url)
    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "invalid" and error["param"] == field
    assert error["details"] == [{"field": field, "message": error["details"][0]["message"]}]


def test_bad_arguments_on_pages_and_unknown_charts(dashboard, seeded: Seeded) -> None:
    response = dashboard.get("/costs?to=nope")
    assert response.status_code == 422
    assert "to: must be a date" in response.data.decode()
    assert dashboard.get("/costs/nope.csv").status_code == 404
    assert dashboard.get(f"/conversations/{seeded.c1}/charts/nope.csv").status_code == 404


def test_login_is_required(client, seeded: Seeded) -> None:
    assert client.get("/costs.json").status_code == 401
    assert client.get(f"/conversations/{seeded.c1}/charts.json").status_code == 401
    assert client.get("/costs").status_code == 302
    assert client.get("/costs", headers=HTMX).headers["HX-Redirect"].startswith("/login")


# --- HTML -------------------------------------------------------------------------------------


def figures_in(doc) -> dict[str, dict]:
    return {
        el.get("data-chart"): json.loads(el.get("data-figure")) for el in doc.select("div.chart")
    }


def test_costs_page_embeds_figures_built_from_the_table(dashboard, seeded: Seeded) -> None:
    doc = page(dashboard.get("/costs", query_string=MARCH))
    figs = figures_in(doc)
    assert set(figs) == set(PROJECT_CHARTS)
    cost = figs["cost"]["data"][0]
    assert cost["x"][9] == "2025-03-10" and cost["y"][9] == pytest.approx(0.008296)
    table = doc.one("table[data-chart-table=tool-cost]")
    assert [td.text for td in table.select("tbody tr")[0].select("td")][:1] == ["fetch"]
    assert figs["tool-cost"]["data"][0]["y"] == ["fetch", "search"]
    # Every chart has its CSV link with the page's filters.
    links = [a.get("href") for a in doc.select("a[download]")]
    assert "/costs/errors.csv?from=2025-03-01&to=2025-03-31" in links
    assert doc.select("#prices form input[name=csrf_token]")


def test_htmx_gets_only_the_charts(dashboard, seeded: Seeded) -> None:
    response = dashboard.get(
        "/costs", query_string={**MARCH, "channel": "beta"}, headers={**HTMX, "HX-Target": "charts"}
    )
    text = response.data.decode()
    assert response.status_code == 200 and "<html" not in text and 'id="prices"' not in text
    figs = figures_in(page(response))
    assert sum(figs["cost"]["data"][0]["y"]) == 0  # only c2's unpriced call
    conv = dashboard.get(f"/conversations/{seeded.c1}/charts", headers=HTMX)
    assert "<html" not in conv.data.decode()
    assert set(figures_in(page(conv))) == {"context", "result-tokens", "turn-cost", "tool-cost"}
    tools = dashboard.get("/tools/charts", query_string={**MARCH, "tool": "fetch"}, headers=HTMX)
    assert set(figures_in(page(tools))) == {"tool-cost", "result-sizes", "errors"}
    # Without htmx the panels are whole pages.
    assert "<html" in dashboard.get("/tools/charts").data.decode()


def test_agent_text_is_escaped_on_the_pages(app, dashboard, project_key) -> None:
    evil = '<img src=x onerror="alert(1)">'
    with data(app):
        conv = simple_conversation(project_key.project_id, evil, at=T0)
        conv_id = conv.id
        db.session.execute(ServiceCall.__table__.update().values(model=evil))
        from webapp.models import ToolInvocation

        db.session.execute(ToolInvocation.__table__.update().values(function_name=evil))
    for url, params in (("/costs", MARCH), (f"/conversations/{conv_id}/charts", {})):
        text = dashboard.get(url, query_string=params).data.decode()
        assert "<img src=x" not in text
        assert "&lt;img src=x" in text  # shown as text (in tables and, escaped, in figures)


def test_charts_page_for_the_conversation_page_include(dashboard, seeded: Seeded) -> None:
    doc = page(dashboard.get(f"/conversations/{seeded.c1}/charts"))
    form = doc.one("#conversation-charts form")
    assert form.get("hx-get") == f"/conversations/{seeded.c1}/charts"
    assert {i.get("name") for i in form.select("input")} == {"freshness", "context_budget"}


def test_long_tables_are_cut_on_the_page_but_not_in_csv(app, dashboard, project_key) -> None:
    with data(app):
        conv_id = big_conversation(project_key.project_id, "long", turns=1, rounds=70).id
    doc = page(dashboard.get(f"/conversations/{conv_id}/charts"))
    table = doc.one("table[data-chart-table=result-tokens]")
    assert len(table.select("tbody tr")) == 300
    assert "The first 300 of 350 rows" in doc.one("#chart-result-tokens").text
    figure = figures_in(doc)["result-tokens"]
    assert sum(len(t["y"]) for t in figure["data"]) == 350  # the chart has them all
    csv_response = dashboard.get(f"/conversations/{conv_id}/charts/result-tokens.csv")
    assert len(csv_records(csv_response)) == 350


# --- queries ----------------------------------------------------------------------------------


def statements(client, count_queries, url: str, params: dict) -> int:
    client.get(url, query_string=params)  # warm-up (session, project)
    with count_queries() as counter:
        response = client.get(url, query_string=params)
    assert response.status_code == 200
    return counter.count


def test_query_counts_do_not_grow_with_the_data(
    app, dashboard, seeded: Seeded, count_queries
) -> None:
    urls = [
        ("/costs.json", MARCH),
        ("/costs", MARCH),
        ("/tools/charts", MARCH),
        ("/costs/tool-cost.csv", MARCH),
        (f"/conversations/{seeded.c1}/charts.json", {}),
        (f"/conversations/{seeded.c1}/charts/context.csv", {}),
    ]
    before = [statements(dashboard, count_queries, u, p) for u, p in urls]
    with data(app):
        for i in range(12):
            simple_conversation(
                seeded.project_id, f"more-{i}", at=T0 + timedelta(hours=i), n_calls=4
            )
            simple_conversation(seeded.project_id, f"later-{i}", at=DAY2 + timedelta(hours=i))
    with app.app_context():  # the stored tool costs caught up (the chart does, INLINE_MAX a time)
        overrides = project_overrides(seeded.project_id)[1]
        attribution_store.refresh_stale(seeded.project_id, overrides)
    after = [statements(dashboard, count_queries, u, p) for u, p in urls]
    assert after == before
    # costs.json: project, its overrides, daily usage, tool activity (both from the
    # roll-ups), result sizes (the roll-ups' count of the range, then the rows while it is
    # small enough for exact percentiles), the stale conversations (none) and the stored tool
    # costs' sums = 8; a conversation: project, overrides, 5 loads.
    assert before[0] <= 8 + LOGIN_CHECK, before
    assert before[4] <= 7 + LOGIN_CHECK, before


# --- price overrides --------------------------------------------------------------------------


def overrides(app, project_id: int) -> dict:
    with app.app_context():
        return db.session.get(Project, project_id).price_overrides


def test_price_overrides_form(app, dashboard, seeded: Seeded) -> None:
    token = csrf_token(dashboard)
    response = dashboard.post(
        "/costs/prices",
        data={
            "csrf_token": token,
            "model": "llama-3*",
            "input_per_mtok": "0.20",
            "output_per_mtok": "0.6",
            "cached_input_per_mtok": "",
        },
    )
    assert response.status_code == 302
    assert response.headers["Location"].endswith("/costs#prices")
    stored = overrides(app, seeded.project_id)
    assert stored["llama-3*"] == {"input_per_mtok": "0.20", "output_per_mtok": "0.6"}
    doc = page(dashboard.get("/costs"))
    assert "llama-3*" in doc.one("#prices table").text

    bad = dashboard.post(
        "/costs/prices",
        data={"csrf_token": token, "model": "x", "input_per_mtok": "-1", "output_per_mtok": "1"},
    )
    assert bad.status_code == 422
    assert "must be a finite, non-negative number" in bad.data.decode()
    assert "x" not in overrides(app, seeded.project_id)
    missing = dashboard.post("/costs/prices", data={"csrf_token": token, "model": "y"})
    assert missing.status_code == 422 and "y" not in overrides(app, seeded.project_id)

    gone = dashboard.post("/costs/prices/delete", data={"csrf_token": token, "model": "llama-3*"})
    assert gone.status_code == 302
    assert "llama-3*" not in overrides(app, seeded.project_id)
    assert (
        dashboard.post(
            "/costs/prices/delete", data={"csrf_token": token, "model": "llama-3*"}
        ).status_code
        == 404
    )
    # Without the CSRF token nothing is written.
    assert (
        dashboard.post(
            "/costs/prices", data={"model": "z", "input_per_mtok": "1", "output_per_mtok": "1"}
        ).status_code
        == 400
    )
    assert "z" not in overrides(app, seeded.project_id)


def test_override_prices_the_attribution(app, dashboard, seeded: Seeded) -> None:
    token = csrf_token(dashboard)
    dashboard.post(
        "/costs/prices",
        data={
            "csrf_token": token,
            "model": "gpt-4o",
            "input_per_mtok": "4",
            "output_per_mtok": "8",
        },
    )
    # c2's final call reported no usage: its search result is priced at the list price, which
    # the override changes at once (40 tokens x $4/M instead of $2/M), an estimate.
    d = get_json(dashboard, "/costs.json", **MARCH)
    tools = {r["tool"]: r for r in rows(d["charts"]["tool-cost"])}
    assert Decimal(tools["search"]["estimated_cost_usd"]) == Decimal("0.00016")
    # c1's calls were billed at $2/M: their results share what was billed, whatever the
    # override says now (issue 23: never attribute more than was billed).
    d = get_json(dashboard, f"/conversations/{seeded.c1}/charts.json")
    tools = {r["tool"]: r for r in rows(d["charts"]["tool-cost"])}
    assert Decimal(tools["fetch"]["estimated_cost_usd"]) == 0
    billed = sum(Decimal(r["cost_usd"]) for r in rows(d["charts"]["turn-cost"]))
    assert Decimal(tools["fetch"]["attributed_cost_usd"]) < billed


def test_today_is_the_default_period(dashboard, seeded: Seeded) -> None:
    d = get_json(dashboard, "/costs.json")
    today = datetime.now(UTC).date()
    assert d["filters"]["to"] == today.isoformat()
    assert d["filters"]["from"] == (today - timedelta(days=29)).isoformat()


def test_page_links_point_at_the_pages_not_their_json_twins(app) -> None:
    """The nav and the conversation page embed these URLs; a .json URL would put raw JSON
    into the page."""
    from flask import url_for

    with app.test_request_context():
        assert url_for("costs.costs_get") == "/costs"
        assert url_for("conversations.conversation_charts_get", conversation_id=7) == (
            "/conversations/7/charts"
        )
