"""The MCP servers of a project (docs/otlp-mapping.md, 'MCP calls'): each server seen in the
calls' MCP details, with its tools, calls, error rate and latency, and what its tool definitions
cost every round that offers them, counted with the model's tokenizer.

Four statements whatever the number of servers: the calls' MCP rows, the definitions offered
under those tools' names, the rounds of the conversations offering them, and their models.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from ..db import db
from ..models import Conversation, McpCall, Message, ServiceCall, ToolDefinition, ToolInvocation
from ..replay.build import tool_definition_tokens
from ..replay.history import ToolDefinition as OfferedTool
from ..tokens import encoding_for_model, estimate


@dataclass
class McpTool:
    name: str
    calls: int = 0
    errors: int = 0
    # The tokens of its definition as the model is sent it; None: no definition was offered.
    definition_tokens: int | None = None


@dataclass
class McpServer:
    server: str  # "" when no span named it
    calls: int = 0
    errors: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    avg_ms: float | None = None
    last_seen: datetime | None = None
    transports: list[str] = field(default_factory=list)
    tools: list[McpTool] = field(default_factory=list)
    # What its tool definitions add to every round that offers them, with the model's
    # tokenizer (`tokenizer`), and how many rounds offered them.
    definition_tokens: int = 0
    tokenizer: str | None = None
    rounds_offering: int = 0

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0


def _rank(values: list[float], q: float) -> float | None:
    """The nearest-rank percentile, as the tools page computes it."""
    if not values:
        return None
    values = sorted(values)
    return values[max(0, math.ceil(q * len(values)) - 1)]


def mcp_servers(project_id: int) -> list[McpServer]:
    """The project's MCP servers, the most called first."""
    rows = db.session.execute(
        select(
            McpCall.server,
            ToolInvocation.function_name,
            McpCall.duration_ms,
            McpCall.error_type,
            ToolInvocation.is_error,
            ToolInvocation.created_at,
            McpCall.transport,
        )
        .join(ToolInvocation, ToolInvocation.id == McpCall.tool_invocation_id)
        .where(McpCall.project_id == project_id)
    ).all()
    servers: dict[str, McpServer] = {}
    tools: dict[str, dict[str, McpTool]] = defaultdict(dict)
    durations: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        server = servers.setdefault(row.server, McpServer(row.server))
        tool = tools[row.server].setdefault(row.function_name, McpTool(row.function_name))
        failed = bool(row.error_type) or bool(row.is_error)
        server.calls += 1
        tool.calls += 1
        server.errors += failed
        tool.errors += failed
        if row.duration_ms is not None:
            durations[row.server].append(row.duration_ms)
        if server.last_seen is None or row.created_at > server.last_seen:
            server.last_seen = row.created_at
        if row.transport and row.transport not in server.transports:
            server.transports.append(row.transport)
    if not servers:
        return []
    for name, server in servers.items():
        values = durations[name]
        server.p50_ms, server.p95_ms = _rank(values, 0.5), _rank(values, 0.95)
        server.avg_ms = sum(values) / len(values) if values else None
        server.tools = sorted(tools[name].values(), key=lambda t: t.name)
        server.transports.sort()
    _definitions(project_id, list(servers.values()))
    return sorted(servers.values(), key=lambda s: (-s.calls, s.server))


def _definitions(project_id: int, servers: list[McpServer]) -> None:
    """Each server's tool definitions as last offered, their tokens with the tokenizer of the
    model that was offered them, and the rounds of the conversations that offered them."""
    names = sorted({t.name for s in servers for t in s.tools})
    offered = db.session.execute(
        select(
            ToolDefinition.conversation_id,
            ToolDefinition.name,
            ToolDefinition.description,
            ToolDefinition.parameters,
        )
        .join(Conversation, Conversation.id == ToolDefinition.conversation_id)
        .where(Conversation.project_id == project_id, ToolDefinition.name.in_(names))
        .order_by(ToolDefinition.conversation_id)
    ).all()
    if not offered:
        return
    latest: dict[str, Any] = {}
    offering: dict[str, set[int]] = defaultdict(set)
    for row in offered:
        latest[row.name] = row  # the latest conversation's definition wins
        offering[row.name].add(row.conversation_id)
    conversations = sorted({c for ids in offering.values() for c in ids})
    rounds = dict(
        db.session.execute(
            select(Message.conversation_id, func.count(ServiceCall.id))
            .join(ServiceCall, ServiceCall.message_id == Message.id)
            .where(Message.conversation_id.in_(conversations))
            .group_by(Message.conversation_id)
        ).all()
    )
    models: dict[int, str] = {}
    for conversation_id, model in db.session.execute(
        select(Message.conversation_id, Message.model)
        .where(
            Message.conversation_id.in_(conversations),
            Message.role == "assistant",
            Message.model.is_not(None),
        )
        .order_by(Message.created_at, Message.id)
    ):
        models[conversation_id] = model  # the latest answer's model
    for server in servers:
        mine = [t for t in server.tools if t.name in latest]
        if not mine:
            continue
        ids = set().union(*(offering[t.name] for t in mine))
        model = models.get(max(ids, key=lambda c: (c in models, c)))
        server.tokenizer = encoding_for_model(model)[0]
        server.rounds_offering = sum(rounds.get(c, 0) for c in ids)

        def count(text: str, model: str | None = model) -> int:
            return estimate(text, model).tokens

        for tool in mine:
            row = latest[tool.name]
            tool.definition_tokens = tool_definition_tokens(
                OfferedTool(row.name, row.description, row.parameters), count
            )
        server.definition_tokens = sum(t.definition_tokens or 0 for t in mine)
