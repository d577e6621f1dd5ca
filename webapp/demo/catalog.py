"""What the demo conversations share: channels, tool definitions, prompts, redaction rules."""

from __future__ import annotations

from datetime import datetime

from .payloads import JSON, ApiRequest, conversation_path, iso

PREFIX = "demo-"
# Freshness windows, chosen for what each channel's tools return and for a demo that keeps
# working: the support bot answers from documents and tickets (valid for 45 days, longer than
# the four weeks the demo spans, so its replays replay); order status changes within minutes (its
# one result is older than that: the intentionally stale one); live metrics within 30 s.
DAY = 86_400
CHANNELS = {"support-bot": 45 * DAY, "orders": 300, "live-dashboard": 30}
# The demo spans this many days back from its load, so the time charts have a shape.
SPAN_DAYS = 28

SUPPORT_PROMPT = (
    "You are Acme's support assistant. Use the tools to look things up; cite search results as "
    "[sourceN]. Never guess order or account data."
)
DASHBOARD_PROMPT = (
    "You answer questions about live operational metrics. Data older than 30 s is stale."
)

TOOLS: dict[str, JSON] = {
    "internal_search": {
        "description": "Search Acme's internal knowledge base.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    },
    "web_search": {
        "description": "Search the public web.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
    "fetch_page": {
        "description": "Fetch a web page and return its text.",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string", "format": "uri"}},
            "required": ["url"],
        },
    },
    "get_weather": {
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
    "lookup_order": {
        "description": "Order status by order number.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
    "query_metrics": {
        "description": "Query a live metric over a time window.",
        "parameters": {
            "type": "object",
            "properties": {"metric": {"type": "string"}, "window": {"type": "string"}},
            "required": ["metric"],
        },
    },
    "export_table": {
        "description": "Export a database table as JSON rows.",
        "parameters": {
            "type": "object",
            "properties": {"table": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["table"],
        },
    },
    "crm_lookup": {
        "description": "Find a customer in the CRM by e-mail.",
        "parameters": {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
    },
    "vault_read": {
        "description": "Read a secret from the vault (never persisted).",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}

# Per-project redaction rules the demo creates (by name, so loading twice adds nothing). They
# name demo tools only, so they never touch an agent's own data in the same project.
REDACTION_RULES: list[JSON] = [
    {
        "name": "demo: mask PII in CRM calls",
        "function_name": "crm_*",
        "kind": "mask",
        "value": ["email", "card", "api_key", "bearer"],
    },
    {
        "name": "demo: never store vault reads",
        "function_name": "vault_read",
        "kind": "skip",
        "value": [],
    },
]


def conversation(
    conversation_id: str,
    *,
    title: str,
    channel: str,
    created: datetime,
    tools: list[str],
    system_prompt: str = SUPPORT_PROMPT,
    metadata: JSON | None = None,
) -> ApiRequest:
    """The conversation's PUT: title, channel, system prompt and the tools it offers."""
    body = {
        "title": title,
        "channel": channel,
        "metadata": {"source": "toolscope demo", **(metadata or {})},
        "system_prompt": system_prompt,
        "tools": [{"name": name, **TOOLS[name]} for name in tools],
        "created_at": iso(created),
    }
    return ApiRequest("PUT", conversation_path(conversation_id), body)
