"""What ties traces together: the projection of a trace depends on other traces only
through tool-call ids, tool-call signatures (calls without ids) and conversation ids. Each
record yields such links; traces that share a link are projected together, so the component a
request touches is closed under every rule of the projection.

Links are hashed (SHA-256 hex), so values of any length and content fit one indexed column.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from . import messages as m
from .mcp import mcp_links


def _hash(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}\x00{value}".encode("utf-8", "surrogatepass")).hexdigest()


def _signature(calls: list[m.Part]) -> str:
    return json.dumps(
        [(c["name"], c["arguments"]) for c in calls], sort_keys=True, ensure_ascii=False
    )


def _messages(record: dict[str, Any]) -> Iterable[m.Message]:
    for name in ("input", "output", "input_fallback", "output_fallback"):
        yield from record.get(name) or ()
    if record.get("message"):
        yield record["message"]


def record_links(record: dict[str, Any]) -> set[str]:
    """The links of one normalized span or log record."""
    links = set()
    for value in (record.get("conversation_ids") or {}).values():
        links.add(_hash("conversation", value))
    for message in _messages(record):
        calls = []
        for part in message["parts"]:
            if part["type"] in ("tool_call", "tool_call_response") and part["id"]:
                links.add(_hash("call", part["id"]))
            if part["type"] == "tool_call":
                calls.append(part)
        if calls and not any(c["id"] for c in calls):
            links.add(_hash("signature", _signature(calls)))
    tool = record.get("tool")
    if tool and tool["id"]:
        links.add(_hash("call", tool["id"]))
    # Two reports of one model call (docs/otlp-mapping.md, 'One model call, one round').
    if record.get("response_id"):
        links.add(_hash("response", f"{record.get('service', '')}\x00{record['response_id']}"))
    # MCP spans in their own trace (docs/otlp-mapping.md, 'MCP calls'): one-way links.
    links |= mcp_links(record)
    return links
