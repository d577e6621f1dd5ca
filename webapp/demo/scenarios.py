"""The demo conversations, each built to show one thing the dashboard and the replay handle.

Timestamps are relative to the moment of loading, so some results are fresh and others stale
(support-bot keeps results 300 s, live-dashboard 30 s). Pure module: every scenario is a list
of API requests; `webapp.demo.loader` posts them through the real API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta

from .catalog import DASHBOARD_PROMPT, PREFIX, SPAN_DAYS, conversation
from .payloads import (
    ApiRequest,
    Call,
    Scenario,
    Turn,
    call_id,
    conversation_path,
    iso,
    sources,
    usage,
)
from .usage import settle_usage

XSS = "<script>alert(1)</script>"

ScenarioBuilder = Callable[[str, datetime], Scenario]
# conversation id -> builder, in loading order.
SCENARIOS: dict[str, ScenarioBuilder] = {}


def scenario(conversation_id: str) -> Callable[[ScenarioBuilder], ScenarioBuilder]:
    def register(build: ScenarioBuilder) -> ScenarioBuilder:
        SCENARIOS[conversation_id] = build
        return build

    return register


# How many days before the load each conversation happened: the demo spans four weeks, so
# the Costs and Tools charts have a shape. Conversations whose point is "now" (a run in
# progress, live metrics, a stale order status, a fresh research turn) stay at day 0.
DAYS_AGO = {
    PREFIX + "revenue-research": 0,
    PREFIX + "weather-parallel": 1,
    PREFIX + "order-status": 0,
    PREFIX + "failed-run": 3,
    PREFIX + "cancelled-run": 5,
    PREFIX + "in-progress": 0,
    PREFIX + "live-metrics": 0,
    PREFIX + "odd-call-ids": 8,
    PREFIX + "large-result": 11,
    PREFIX + "xss-probe": 14,
    PREFIX + "tool-errors": 17,
    PREFIX + "sdk-message-tools": 20,
    PREFIX + "imported-openai": 23,
    PREFIX + "crm-redaction": 26,
}


def build_all(now: datetime) -> list[Scenario]:
    """Every scenario, its reported usage that of the context it sends (``usage.settle_usage``)."""
    return [
        settle_usage(build(cid, now - timedelta(days=DAYS_AGO.get(cid, 0))))
        for cid, build in SCENARIOS.items()
    ]


def _search_hits(first: int, topic: str) -> str:
    return sources(
        first,
        [
            (
                f"{topic}: Q3 report",
                "https://intranet.acme.test/finance/q3",
                "Revenue 48.2 M USD, up 12%.",
            ),
            (
                f"{topic}: board memo",
                "https://intranet.acme.test/board/2024-10",
                "Growth led by enterprise.",
            ),
            (
                f"{topic}: press release",
                "https://acme.test/press/q3",
                "Acme reports record quarter.",
            ),
            (
                f"{topic}: analyst note",
                "https://analysts.test/acme",
                "Margins under pressure in EMEA.",
            ),
        ],
    )


# -- the scenarios ---------------------------------------------------------------------------------


@scenario(PREFIX + "revenue-research")
def revenue_research(cid: str, now: datetime) -> Scenario:
    """Two turns: search (3 parallel) -> fetch -> answer citing some sources. The first turn is
    two hours old (stale), the follow-up two minutes old (fresh), sources numbered on."""
    first = now - timedelta(hours=2)
    turn1 = (
        Turn(f"{cid}-1", first, "How did revenue develop last quarter?")
        .round(
            Call(
                "internal_search",
                {"query": "Q3 revenue", "limit": 4},
                _search_hits(1, "Finance"),
                0.8,
            ),
            Call(
                "internal_search",
                {"query": "board memo Q3", "limit": 4},
                sources(
                    5,
                    [
                        (
                            "Board memo",
                            "https://intranet.acme.test/board/q3",
                            "Approved the EMEA plan.",
                        ),
                    ],
                ),
                0.6,
            ),
            Call(
                "web_search",
                {"query": "Acme Q3 results"},
                sources(
                    6,
                    [
                        ("Acme Q3 results - News", "https://news.test/acme-q3", "Shares rose 4%."),
                        ("Acme investor page", "https://acme.test/investors", "Q3 deck available."),
                    ],
                ),
                1.1,
            ),
            text="I'll check the finance reports, the board memo and the press at the same time.",
            reasoning=(
                "The question is about last quarter's revenue. Internal finance documents are "
                "authoritative; the web may add the market's reaction. The three searches are "
                "independent, so they can run in parallel."
            ),
        )
        .round(
            Call(
                "fetch_page",
                {"url": "https://acme.test/investors"},
                "Q3 2024: revenue 48.2 M USD (+12% y/y); operating margin 18%.",
                0.9,
            ),
            text="The Q3 report says +12%; let me confirm it on the investor page.",
            reasoning=(
                "Two internal sources agree on 48.2 M USD. The investor relations page is the "
                "public figure; fetching it confirms the number before I cite it."
            ),
        )
    )
    answer1 = (
        "Revenue grew 12% year over year to 48.2 M USD [source1], led by the enterprise segment "
        "[source2]. Shares rose 4% after the results [source6]."
    )
    turn2 = Turn(f"{cid}-2", now - timedelta(minutes=2), "And what about margins?").round(
        Call(
            "internal_search",
            {"query": "Q3 operating margin", "limit": 3},
            sources(
                8,
                [
                    (
                        "Margin bridge Q3",
                        "https://intranet.acme.test/finance/margins",
                        "Operating margin 18%.",
                    ),
                    (
                        "EMEA cost review",
                        "https://intranet.acme.test/emea/costs",
                        "Logistics costs +9%.",
                    ),
                ],
            ),
            0.7,
        ),
    )
    answer2 = "Operating margin was 18% [source8]; EMEA logistics costs weigh on it [SOURCE9]."
    return Scenario(
        cid,
        "multi-round turn, 3 parallel calls, [sourceN] citations (sources 3, 4, 5, 7 uncited), "
        "two turns two hours apart",
        [
            conversation(
                cid,
                title="Quarterly revenue research",
                channel="support-bot",
                created=first,
                tools=["internal_search", "web_search", "fetch_page"],
            ),
            turn1.request(cid, answer1),
            turn2.request(cid, answer2),
        ],
    )


@scenario(PREFIX + "weather-parallel")
def weather_parallel(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(seconds=50)
    turn = Turn(
        f"{cid}-1",
        at,
        "Weather in Zurich, Berlin and Lisbon?",
        model="claude-sonnet-4-20250514",
        provider="anthropic",
    ).round(
        Call(
            "get_weather",
            {"city": "Zurich", "unit": "celsius"},
            '{"temp": 18, "sky": "clear"}',
            0.42,
        ),
        Call(
            "get_weather",
            {"city": "Berlin", "unit": "celsius"},
            '{"temp": 15, "sky": "rain"}',
            0.95,
        ),
        Call(
            "get_weather",
            {"city": "Lisbon", "unit": "celsius"},
            '{"temp": 24, "sky": "sunny"}',
            0.31,
        ),
    )
    return Scenario(
        cid,
        "three overlapping parallel calls in one round, Claude usage, fresh results",
        [
            conversation(
                cid,
                title="Weather in three cities",
                channel="support-bot",
                created=at,
                tools=["get_weather"],
            ),
            turn.request(cid, "Zurich 18 °C and clear, Berlin 15 °C with rain, Lisbon 24 °C."),
        ],
    )


@scenario(PREFIX + "order-status")
def order_status(cid: str, now: datetime) -> Scenario:
    """The freshness window's story: an order looked up 20 minutes ago may have changed since."""
    at = now - timedelta(minutes=20)
    turn = Turn(f"{cid}-1", at, "Where is my order A-1042?", model="gpt-4o-mini").round(
        Call(
            "lookup_order",
            {"order_id": "A-1042"},
            '{"order_id": "A-1042", "status": "shipped", "carrier": "DHL"}',
            0.25,
        ),
    )
    return Scenario(
        cid,
        "a stale result (20 min, window 300 s): left out of the replay so the model looks again",
        [
            conversation(
                cid, title="Order A-1042", channel="orders", created=at, tools=["lookup_order"]
            ),
            turn.request(cid, "Your order A-1042 has shipped with DHL."),
        ],
    )


@scenario(PREFIX + "failed-run")
def failed_run(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=3)
    turn = (
        Turn(f"{cid}-1", at, "Summarise the EMEA cost review.")
        .round(Call("internal_search", {"query": "EMEA cost review"}, _search_hits(1, "EMEA"), 0.5))
        .round(
            Call(
                "fetch_page",
                {"url": "https://intranet.acme.test/emea/costs"},
                '{"error": "upstream timeout after 30 s"}',
                30.0,
                is_error=True,
            )
        )
    )
    return Scenario(
        cid,
        "a failed run: the second round's call errored and the agent gave up",
        [
            conversation(
                cid,
                title="EMEA cost review (failed)",
                channel="support-bot",
                created=at,
                tools=["internal_search", "fetch_page"],
            ),
            turn.request(cid, None, status="failed"),
        ],
    )


@scenario(PREFIX + "cancelled-run")
def cancelled_run(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=1)
    turn = (
        Turn(f"{cid}-1", at, "Compare our prices with the top 3 competitors.")
        .round(
            Call(
                "web_search",
                {"query": "acme competitors pricing"},
                sources(
                    1,
                    [
                        (
                            "Competitor pricing 2024",
                            "https://compare.test/pricing",
                            "Three vendors compared.",
                        ),
                    ],
                ),
                0.6,
            )
        )
        .round(
            Call(
                "fetch_page", {"url": "https://compare.test/pricing"}, "Vendor A: 49 USD ...", 0.8
            ),
            Call("fetch_page", {"url": "https://vendor-b.test/pricing"}, None, 2.0),
        )
    )
    return Scenario(
        cid,
        "a cancelled run: the user stopped it while a fetch was running (no response)",
        [
            conversation(
                cid,
                title="Competitor pricing (cancelled)",
                channel="support-bot",
                created=at,
                tools=["web_search", "fetch_page"],
            ),
            turn.request(cid, None, status="cancelled"),
        ],
    )


@scenario(PREFIX + "in-progress")
def in_progress(cid: str, now: datetime) -> Scenario:
    """Per-service-call persistence: rounds posted as they happen, run not done."""
    at = now - timedelta(seconds=12)
    turn = (
        Turn(f"{cid}-1", at, "Is checkout latency back to normal?")
        .round(
            Call(
                "query_metrics",
                {"metric": "checkout.p95_ms", "window": "15m"},
                '{"p95_ms": 840, "baseline": 310}',
                0.4,
            )
        )
        .round(
            Call("query_metrics", {"metric": "checkout.errors", "window": "15m"}, None, 3.0),
            Call("query_metrics", {"metric": "payments.p95_ms", "window": "15m"}, None, 3.0),
        )
    )
    assistant = turn.assistant_message(None, "in_progress")
    requests = [
        conversation(
            cid,
            title="Checkout latency (agent running)",
            channel="live-dashboard",
            created=at,
            tools=["query_metrics"],
            system_prompt=DASHBOARD_PROMPT,
        ),
        ApiRequest(
            "POST",
            conversation_path(cid, "messages"),
            {"messages": [turn.user_message(), assistant]},
        ),
    ]
    round_path = conversation_path(cid, "messages", turn.assistant_id, "rounds")
    round0 = turn.rounds[0]
    # Round 0 as an agent posts it: the calls when the model asks, again with the results.
    asked = [
        {k: v for k, v in c.items() if k not in ("response", "ended_at")} for c in round0["calls"]
    ]
    requests.append(
        ApiRequest("POST", f"{round_path}/0", {"calls": asked, "usage": round0["usage"]})
    )
    requests.append(ApiRequest("POST", f"{round_path}/0", {"calls": round0["calls"]}))
    round1 = turn.rounds[1]
    requests.append(
        ApiRequest(
            "POST",
            f"{round_path}/1",
            {"calls": round1["calls"], "usage": round1["usage"], "status": "in_progress"},
        )
    )
    return Scenario(
        cid, "an in-progress run posted round by round; round 1 still running", requests
    )


@scenario(PREFIX + "live-metrics")
def live_metrics(cid: str, now: datetime) -> Scenario:
    old = Turn(
        f"{cid}-1", now - timedelta(minutes=2), "Orders per minute right now?", model="gpt-4o-mini"
    ).round(
        Call(
            "query_metrics", {"metric": "orders.per_minute", "window": "1m"}, '{"value": 312}', 0.2
        ),
    )
    new = Turn(f"{cid}-2", now - timedelta(seconds=10), "And now?", model="gpt-4o-mini").round(
        Call(
            "query_metrics", {"metric": "orders.per_minute", "window": "1m"}, '{"value": 298}', 0.2
        ),
    )
    return Scenario(
        cid,
        "live-dashboard channel (30 s window): a 2-minute-old result is stale, a 10 s one fresh",
        [
            conversation(
                cid,
                title="Live orders per minute",
                channel="live-dashboard",
                created=now - timedelta(minutes=2),
                tools=["query_metrics"],
                system_prompt=DASHBOARD_PROMPT,
            ),
            old.request(cid, "312 orders per minute."),
            new.request(cid, "298 orders per minute, slightly down."),
        ],
    )


@scenario(PREFIX + "odd-call-ids")
def odd_call_ids(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=4)
    turn = (
        Turn(f"{cid}-1", at, "Check stock for SKU 17 and SKU 18.", model="gpt-4.1")
        .round(
            Call("lookup_order", {"order_id": "SKU-17"}, '{"stock": 4}', 0.3, id=""),
            Call("lookup_order", {"order_id": "SKU-18"}, '{"stock": 0}', 0.3, id=""),
        )
        .round(
            Call("web_search", {"query": "SKU-18 restock"}, "[]", 0.4, id="call_dup"),
            Call("web_search", {"query": "SKU-18 supplier"}, "[]", 0.4, id="call_dup"),
        )
    )
    return Scenario(
        cid,
        "calls with empty ids (replay generates stable ones) and a duplicated call id",
        [
            conversation(
                cid,
                title="Stock check with odd call ids",
                channel="support-bot",
                created=at,
                tools=["lookup_order", "web_search"],
            ),
            turn.request(cid, "SKU 17: 4 in stock. SKU 18 is sold out; no restock date found."),
        ],
    )


@scenario(PREFIX + "large-result")
def large_result(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=6)
    rows = [
        {
            "id": n,
            "customer": f"customer-{n:05d}",
            "country": ("CH", "DE", "PT", "US")[n % 4],
            "plan": ("free", "team", "enterprise")[n % 3],
            "mrr_usd": (n * 37) % 900,
            "note": "renewal due; contact account owner before the end of the quarter",
        }
        for n in range(5_600)
    ]
    result = json.dumps({"table": "accounts", "rows": rows})
    # About 307,000 tokens go back to the model with this result: gpt-4.1 (a 1M-token context),
    # not a 128k model, which would refuse the request.
    turn = Turn(f"{cid}-1", at, "Export the accounts table.", model="gpt-4.1").round(
        Call("export_table", {"table": "accounts", "limit": 10_000}, result, 4.2),
    )
    return Scenario(
        cid,
        f"a very large result ({len(result) / 1e6:.1f} MB of JSON): truncated by the token cap",
        [
            conversation(
                cid,
                title="Accounts export (1 MB result)",
                channel="support-bot",
                created=at,
                tools=["export_table"],
            ),
            turn.request(cid, "Exported 5,600 accounts."),
        ],
    )


@scenario(PREFIX + "xss-probe")
def xss_probe(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=8)
    turn = Turn(f"{cid}-1", at, f'Search for {XSS} and "><img src=x onerror=alert(2)>').round(
        Call(
            "web_search",
            {"query": XSS, "html": "<img src=x onerror=alert(3)>"},
            f'<b>not bold</b>{XSS}<a href="javascript:alert(4)">link</a>',
            0.3,
        ),
    )
    return Scenario(
        cid,
        "agent content that looks like HTML/JS in title, arguments and results: must show as text",
        [
            conversation(
                cid,
                title=f"{XSS} escaping check",
                channel="support-bot",
                created=at,
                tools=["web_search"],
                metadata={"note": XSS},
            ),
            turn.request(cid, f"The page contained {XSS}; it is shown as text."),
        ],
    )


@scenario(PREFIX + "tool-errors")
def tool_errors(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=30)
    turn = Turn(f"{cid}-1", at, "What does our refund policy say?", model="gpt-4.1").round(
        Call(
            "fetch_page", {"url": "https://acme.test/refunds"}, "404 Not Found", 0.2, is_error=True
        ),
        Call(
            "internal_search",
            {"query": "refund policy"},
            sources(
                1,
                [
                    ("Refund policy v3", "https://intranet.acme.test/policies/refunds", "30 days."),
                    (
                        "Refund FAQ",
                        "https://intranet.acme.test/faq/refunds",
                        "Store credit option.",
                    ),
                ],
            ),
            0.5,
        ),
        # The agent crashed before recording this result: no response.
        Call("web_search", {"query": "acme refund policy"}, None, 0.5),
    )
    return Scenario(
        cid,
        "tool errors (is_error) the model recovered from, and a call without a response",
        [
            conversation(
                cid,
                title="Refund policy",
                channel="support-bot",
                created=at,
                tools=["fetch_page", "internal_search", "web_search"],
            ),
            turn.request(cid, "Refunds are possible within 30 days [source1]."),
        ],
    )


@scenario(PREFIX + "sdk-message-tools")
def sdk_placeholder(cid: str, now: datetime) -> Scenario:
    """unique_sdk's MessageTool API carries only a message id: the calls arrive first and are
    attached when the conversation's messages come."""
    at = now - timedelta(minutes=45)
    message_id = f"{cid}-1-assistant"
    tools = [
        {
            "externalToolCallId": call_id(cid, 0, 0),
            "functionName": "internal_search",
            "arguments": {"query": "holiday calendar 2025"},
            "roundIndex": 0,
            "sequenceIndex": 0,
            "response": {
                "content": sources(
                    1,
                    [
                        (
                            "Holidays 2025",
                            "https://intranet.acme.test/hr/holidays",
                            "12 public holidays.",
                        )
                    ],
                )
            },
        },
        {
            "externalToolCallId": call_id(cid, 0, 1),
            "functionName": "get_weather",
            "arguments": {"city": "Zurich"},
            "roundIndex": 0,
            "sequenceIndex": 1,
            "response": {"content": '{"temp": 3, "sky": "snow"}'},
        },
    ]
    messages = [
        {
            "id": f"{cid}-1-user",
            "role": "user",
            "content": "Holidays and weather for the offsite?",
            "created_at": iso(at),
        },
        {
            "id": message_id,
            "role": "assistant",
            "status": "completed",
            "model": "gpt-4o",
            "content": "12 public holidays in 2025 [source1]; Zurich is snowy at 3 °C.",
            "created_at": iso(at + timedelta(seconds=1)),
            # Answered when the message was stored: without a time the server stamps its own,
            # and the cost lands on the day of the load instead of this conversation's day.
            "usage": [
                {
                    "round_index": 0,
                    **usage("gpt-4o", "openai", 820, 44, at=at + timedelta(seconds=1)),
                }
            ],
        },
    ]
    return Scenario(
        cid,
        "MessageTool API (unique_sdk): calls posted before their message and conversation",
        [
            ApiRequest("POST", "/messages/tools", {"messageId": message_id, "tools": tools}),
            conversation(
                cid,
                title="Offsite planning (via unique_sdk)",
                channel="support-bot",
                created=at,
                tools=["internal_search", "get_weather"],
            ),
            ApiRequest("POST", conversation_path(cid, "messages"), {"messages": messages}),
        ],
    )


@scenario(PREFIX + "imported-openai")
def imported_openai(cid: str, now: datetime) -> Scenario:
    messages = [
        {"role": "user", "content": "Convert 250 EUR to CHF and USD."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_eur_chf",
                    "type": "function",
                    "function": {
                        "name": "convert",
                        "arguments": '{"amount": 250, "from": "EUR", "to": "CHF"}',
                    },
                },
                {
                    "id": "call_eur_usd",
                    "type": "function",
                    "function": {
                        "name": "convert",
                        "arguments": '{"amount": 250, "from": "EUR", "to": "USD"}',
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_eur_chf", "content": '{"result": 236.1}'},
        {"role": "tool", "tool_call_id": "call_eur_usd", "content": '{"result": 271.4}'},
        {"role": "assistant", "content": "250 EUR is 236.10 CHF or 271.40 USD."},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "convert",
                "description": "Convert currencies.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "amount": {"type": "number"},
                        "from": {"type": "string"},
                        "to": {"type": "string"},
                    },
                },
            },
        }
    ]
    return Scenario(
        cid,
        "an OpenAI chat-completions message list imported as a conversation",
        [
            ApiRequest(
                "POST",
                conversation_path(cid, "import"),
                {
                    "format": "openai-chat",
                    "messages": messages,
                    "tools": tools,
                    "system": "You convert currencies.",
                    "started_at": iso(now - timedelta(hours=5)),
                },
            ),
        ],
    )


@scenario(PREFIX + "crm-redaction")
def crm_redaction(cid: str, now: datetime) -> Scenario:
    at = now - timedelta(minutes=15)
    turn = Turn(f"{cid}-1", at, "Why was jane.doe@example.com charged twice?").round(
        Call(
            "crm_lookup",
            {"email": "jane.doe@example.com"},
            '{"customer": "Jane Doe", "email": "jane.doe@example.com", '
            '"card": "4111 1111 1111 1111", "api_key": "sk-live-51HxDemoKey0000000000000000"}',
            0.4,
        ),
        Call(
            "vault_read",
            {"path": "payments/stripe"},
            '{"secret": "sk_live_demo_never_stored"}',
            0.1,
        ),
    )
    return Scenario(
        cid,
        "redaction before storage: e-mail, card and key masked; the vault read not stored at all",
        [
            conversation(
                cid,
                title="Double charge (PII masked)",
                channel="support-bot",
                created=at,
                tools=["crm_lookup", "vault_read"],
            ),
            turn.request(cid, "The second charge was a pre-authorisation; it drops in 3 days."),
        ],
    )


@scenario(PREFIX + "daily-digest")
def daily_digest(cid: str, now: datetime) -> Scenario:
    """A scheduled agent, one run every morning for four weeks: the time charts' shape."""
    start = now - timedelta(days=SPAN_DAYS - 1)
    requests = [
        conversation(
            cid,
            title="Morning support digest (scheduled, daily)",
            channel="support-bot",
            created=start,
            tools=["internal_search", "fetch_page"],
        )
    ]
    first = 1
    for day in range(SPAN_DAYS):
        at = start + timedelta(days=day) - timedelta(hours=2, minutes=(day * 7) % 45)
        # A weekly rhythm (two quiet days, a bigger model once a week; by day number, so every
        # load stores the same rows) and a flaky search backend on a few days.
        searches = 1 if day % 7 >= 5 else 2 + day % 3
        model = "gpt-4o" if day % 7 == 0 else "gpt-4o-mini"
        turn = Turn(f"{cid}-{day + 1}", at, "Summarise yesterday's support tickets.", model=model)
        calls = []
        for n in range(searches):
            failed = day % 9 == 4 and n == 0
            calls.append(
                Call(
                    "internal_search",
                    {"query": f"tickets day -{SPAN_DAYS - day} topic {n}"},
                    '{"error": "search backend timed out"}'
                    if failed
                    else sources(
                        first + n,
                        [
                            (
                                f"Ticket cluster {day}.{n}",
                                f"https://support.acme.test/clusters/{day}/{n}",
                                "Customers report slow invoice downloads. " * (2 + day % 4),
                            )
                        ],
                    ),
                    0.25 + 0.1 * n + 0.05 * (day % 4),
                    is_error=failed,
                )
            )
        turn.round(*calls)
        turn.round(
            Call(
                "fetch_page",
                {"url": f"https://support.acme.test/clusters/{day}/0"},
                "Cluster detail: " + "ticket summary line. " * (20 + 5 * (day % 6)),
                0.6 + 0.1 * (day % 5),
            ),
        )
        requests.append(turn.request(cid, f"Digest for day {day + 1}: see [source{first}]."))
        first += searches
    return Scenario(
        cid,
        f"one scheduled run a day for {SPAN_DAYS} days (time charts), a flaky search on some days",
        requests,
    )
