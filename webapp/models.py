"""The domain model as SQLAlchemy 2 typed models: projects, channels, conversations, messages,
their tool calls and service calls, redaction rules, and the raw OTLP rows.

Integer primary keys (`id`) are internal row ids; the ids agents send (`external_id`,
`external_tool_call_id`) are kept apart and are unique per project, never globally, so that one
tenant can never collide with or probe another's ids.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    DDL,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    event,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from .db import JSONType, UTCDateTime, db, utcnow

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit key for tool calls.
RowId = BigInteger().with_variant(Integer(), "sqlite")

ROLES = ("system", "user", "assistant")
RUN_STATUSES = ("completed", "failed", "cancelled", "in_progress")


class Project(db.Model):
    __tablename__ = "project"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Replay freshness window: older tool results are not replayed; channels may override it.
    freshness_seconds: Mapped[int | None] = mapped_column(Integer, default=300)
    # {"model-name": {"input_per_mtok": "1.0", "output_per_mtok": "2.0", ...}}
    price_overrides: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)


class ApiKey(db.Model):
    __tablename__ = "api_key"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200), default="")
    # The first characters of the key, shown in lists so people can tell keys apart.
    prefix: Mapped[str] = mapped_column(String(16))
    # SHA-256 of the whole key: keys are long random strings, so a slow hash adds nothing.
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    project: Mapped[Project] = relationship()


class Channel(db.Model):
    """A named replay policy within a project, e.g. `support-bot`."""

    __tablename__ = "channel"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    # None: use the project's window.
    freshness_seconds: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Conversation(db.Model):
    __tablename__ = "conversation"
    __table_args__ = (
        UniqueConstraint("project_id", "external_id"),
        # The list page sorts by last activity within a project and pages by it (keyset).
        Index(None, "project_id", "updated_at", "id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(255))
    channel_id: Mapped[int | None] = mapped_column(
        ForeignKey("channel.id", ondelete="SET NULL"), index=True
    )
    title: Mapped[str] = mapped_column(Text, default="")
    # "metadata" is reserved by SQLAlchemy's declarative base, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSONType, default=dict)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Bumped by every write that changes what the replay reads of this conversation (its
    # messages, calls, usage, tool definitions, own fields), in the UPDATE that sets
    # updated_at: the replay cache's key (webapp.services.replay_cache).
    revision: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    channel: Mapped[Channel | None] = relationship()


class Message(db.Model):
    """A chat message. Placeholders (conversation_id NULL) hold tool calls that arrived first."""

    __tablename__ = "message"
    __table_args__ = (
        UniqueConstraint("project_id", "external_id"),
        Index(None, "conversation_id", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    external_id: Mapped[str] = mapped_column(String(255))
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE")
    )
    role: Mapped[str] = mapped_column(String(16), default="assistant")
    content: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Run status of an assistant turn; None for user and system messages.
    status: Mapped[str | None] = mapped_column(String(16))
    model: Mapped[str | None] = mapped_column(String(200))
    content_tokens: Mapped[int | None] = mapped_column(Integer)
    # Stored by the import API from a provider message list: what a model was sent, which the
    # replay sends back as it was (see webapp.replay.build).
    imported: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())


class ToolInvocation(db.Model):
    """One tool call and its optional response, keyed by (message, round, sequence)."""

    __tablename__ = "tool_invocation"
    __table_args__ = (
        UniqueConstraint("message_id", "round_index", "sequence_index"),
        # Per-tool statistics and the tools page filter by project and function name.
        Index(None, "project_id", "function_name"),
        # The calls explorer lists a project's calls newest first and pages by (time, id).
        Index(None, "project_id", "created_at", "id"),
        # The explorer's status=error: its capped count and its page read only the errors
        # (issue 24). The condition is the explorer's own text (call_explorer.status_conditions:
        # ``is_(True)``), or neither planner would prove the query implies it.
        Index(
            "ix_tool_invocation_error",
            "project_id",
            "created_at",
            "id",
            sqlite_where=text("is_error IS 1"),
            postgresql_where=text("is_error IS true"),
        ),
        # The rare statuses likewise (migration ce4f6b8d0a2c): no-response and not-captured
        # (their conditions begin with ``response IS NULL``), redacted.
        Index(
            "ix_tool_invocation_no_response",
            "project_id",
            "created_at",
            "id",
            sqlite_where=text("response IS NULL"),
            postgresql_where=text("response IS NULL"),
        ),
        Index(
            "ix_tool_invocation_redacted",
            "project_id",
            "created_at",
            "id",
            sqlite_where=text("redactions IS NOT NULL"),
            postgresql_where=text("redactions IS NOT NULL"),
        ),
        # The tool usage page walks a tool's calls newest first (issue 24).
        Index(None, "project_id", "function_name", "created_at", "id"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    message_id: Mapped[int] = mapped_column(ForeignKey("message.id", ondelete="CASCADE"))
    round_index: Mapped[int] = mapped_column(Integer)
    sequence_index: Mapped[int] = mapped_column(Integer)
    external_tool_call_id: Mapped[str] = mapped_column(String(255), default="")
    function_name: Mapped[str] = mapped_column(String(255))
    arguments: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # NULL: no response yet. An empty string is a response.
    response: Mapped[str | None] = mapped_column(Text)
    response_created_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    is_error: Mapped[bool] = mapped_column(Boolean, default=False)
    # Names of the redaction rules that changed this call before it was stored.
    redactions: Mapped[list[str] | None] = mapped_column(JSONType)
    arguments_tokens: Mapped[int | None] = mapped_column(Integer)
    response_tokens: Mapped[int | None] = mapped_column(Integer)
    # How the token counts were obtained, e.g. "tiktoken:o200k_base" or "heuristic:chars/4".
    token_method: Mapped[str | None] = mapped_column(String(64))
    response_bytes: Mapped[int | None] = mapped_column(Integer)
    # A random number that changes with every write to the row: the replay's loader reads only
    # (id, stamp) of the rows its worker made objects of before, and the rest of a row only
    # when its stamp moved (webapp.services.row_memo). The write paths set a new one; triggers
    # set one for any other insert or update ("A tool call row's stamp" below). NULL (a row
    # stored before the column): read whole every time.
    stamp: Mapped[int | None] = mapped_column(BigInteger)


class McpCall(db.Model):
    """How a tool call went through MCP: the `tools/call` exchange the OTLP projection attached
    to it (docs/otlp-mapping.md, 'MCP calls'). Written and deleted with its call."""

    __tablename__ = "mcp_call"
    __table_args__ = (
        # The MCP servers page groups a project's calls by server.
        Index(None, "project_id", "server"),
    )

    tool_invocation_id: Mapped[int] = mapped_column(
        RowId, ForeignKey("tool_invocation.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    # The server's `service.name`, else its name or address as the client saw it; "" unknown.
    server: Mapped[str] = mapped_column(String(255), default="")
    method: Mapped[str] = mapped_column(String(64), default="tools/call")
    transport: Mapped[str | None] = mapped_column(String(32))
    session_id: Mapped[str | None] = mapped_column(String(255))
    request_id: Mapped[str | None] = mapped_column(String(255))
    protocol_version: Mapped[str | None] = mapped_column(String(32))
    # The MCP span's own duration (the client's round trip, else the server's handling), and
    # the server's handling when both sides were seen.
    duration_ms: Mapped[float | None] = mapped_column(Float)
    server_duration_ms: Mapped[float | None] = mapped_column(Float)
    error_type: Mapped[str | None] = mapped_column(String(64))
    trace_id: Mapped[str] = mapped_column(String(32))
    span_id: Mapped[str] = mapped_column(String(16))


class ServiceCall(db.Model):
    """One LLM service call (a round) of an assistant turn, with the usage it reported."""

    __tablename__ = "service_call"
    __table_args__ = (UniqueConstraint("message_id", "round_index"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("message.id", ondelete="CASCADE"))
    round_index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str | None] = mapped_column(String(200))
    provider: Mapped[str | None] = mapped_column(String(64))
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the agent sent the service call and when its answer was complete (its latency).
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What the model said (text alongside its tool calls) and reasoned in this service call,
    # when the agent sends it.
    content: Mapped[str | None] = mapped_column(Text)
    reasoning: Mapped[str | None] = mapped_column(Text)
    # Cost is fixed at ingestion, with the price source that produced it (prices change).
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(18, 9))
    price_source: Mapped[str | None] = mapped_column(String(64))
    price_version: Mapped[str | None] = mapped_column(String(64))


class ToolDefinition(db.Model):
    """A tool the model was offered in a conversation (name, description, JSON schema)."""

    __tablename__ = "tool_definition"
    __table_args__ = (UniqueConstraint("conversation_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(Text)
    parameters: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


class RedactionRule(db.Model):
    """A per-project rule applied to tool calls before they are stored (masks, paths, skip).

    kind: `mask` (value: list of built-in detectors such as "email", "card", "api_key",
    "bearer"), `redact_paths` (value: list of argument/result JSON paths), `skip` (the tool is
    not persisted at all). function_name: a tool name or glob; NULL means every tool.
    """

    __tablename__ = "redaction_rule"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("project.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    function_name: Mapped[str | None] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    value: Mapped[Any] = mapped_column(JSONType, default=list)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SavedView(db.Model):
    """A list page's filters under a name, shared by everyone using the project: `page` is
    the list (conversations, calls, tools, costs), `query` its URL's query string (a time
    range preset in it stays relative). One name per page and project."""

    __tablename__ = "saved_view"
    __table_args__ = (UniqueConstraint("project_id", "page", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    page: Mapped[str] = mapped_column(String(32))
    name: Mapped[str] = mapped_column(String(100))
    query: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ModelConnection(db.Model):
    """A project's connection to a model provider (docs/runs.md, 'Model connections').

    kind: `openai` (any OpenAI-compatible base URL) or `anthropic`. The secret is either
    stored encrypted (`secret_encrypted`, a Fernet token under a key derived from SECRET_KEY)
    or named as an environment variable of the server (`secret_env`, the variable's name);
    the extra headers are encrypted too, since gateways put keys in headers. Read and written
    only through webapp.services.model_connections, which never hands the plain text out but
    to the provider's SDK.
    """

    __tablename__ = "model_connection"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(16))
    base_url: Mapped[str] = mapped_column(String(2048))
    default_model: Mapped[str | None] = mapped_column(String(200))
    # A Fernet token of the JSON object {header: value}; NULL: no extra headers.
    headers_encrypted: Mapped[str | None] = mapped_column(Text)
    secret_encrypted: Mapped[str | None] = mapped_column(Text)
    secret_env: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class DashboardSession(db.Model):
    """A dashboard login. The session cookie carries a random token; only its SHA-256 is kept,
    and logging out deletes the row, so a copied cookie stops working with the logout."""

    __tablename__ = "dashboard_session"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class LoginThrottle(db.Model):
    """Login attempts of one client address or account in the current fixed window.

    In the database, so every worker and server counts the same attempts.
    """

    __tablename__ = "login_throttle"

    # "address:<ip>" or "account:<name>".
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    attempts: Mapped[int] = mapped_column(Integer)


# --- Roll-ups (issue 24): the tools and costs pages' sums per bucket ----------------------------
#
# Written by webapp.ingest.rollups in the transaction of every write that changes the rows they
# sum (webapp.analytics.rollups says what a row adds); read by webapp.queries.rollups. Every row
# counts once per span: in its hour (span 3600) and in its UTC day (span 86400).


class ToolRollup(db.Model):
    """Tool calls of one project, tool and bucket: counts, sums and two DDSketches (durations
    in ms, result sizes in tokens) stored as their bins' counts (JSON text)."""

    __tablename__ = "tool_rollup"
    __table_args__ = (UniqueConstraint("project_id", "span", "bucket", "function_name"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    span: Mapped[int] = mapped_column(Integer)
    bucket: Mapped[datetime] = mapped_column(UTCDateTime)
    function_name: Mapped[str] = mapped_column(String(255))
    calls: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)
    responses: Mapped[int] = mapped_column(BigInteger, default=0)
    missing: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_n: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_sum: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens_n: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens_sum: Mapped[int] = mapped_column(BigInteger, default=0)
    timed: Mapped[int] = mapped_column(BigInteger, default=0)
    durations: Mapped[str | None] = mapped_column(Text)
    sizes: Mapped[str | None] = mapped_column(Text)
    last_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ModelRollup(db.Model):
    """Service calls (in a conversation) of one project, model ('' for none) and bucket: the
    usage they reported and their stored cost, in nano-USD so that sums stay exact."""

    __tablename__ = "model_rollup"
    __table_args__ = (UniqueConstraint("project_id", "span", "bucket", "model"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    span: Mapped[int] = mapped_column(Integer)
    bucket: Mapped[datetime] = mapped_column(UTCDateTime)
    model: Mapped[str] = mapped_column(String(200))
    service_calls: Mapped[int] = mapped_column(BigInteger, default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_nano: Mapped[int] = mapped_column(BigInteger, default=0)
    unpriced: Mapped[int] = mapped_column(BigInteger, default=0)


class ConversationAttribution(db.Model):
    """Which revision of a conversation (and price overrides) its stored tool costs were
    computed from, and whether some of its token counts were still pending then
    (webapp.services.attribution_store)."""

    __tablename__ = "conversation_attribution"

    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(BigInteger)
    pending_counts: Mapped[bool] = mapped_column(Boolean)
    # A digest of the price overrides the costs were computed with (another: stale).
    prices: Mapped[str] = mapped_column(String(64))


class ConversationToolCost(db.Model):
    """One conversation's re-send attribution of one tool, over the service calls of one hour
    (``bucket``). Costs in femto-USD, rounded down."""

    __tablename__ = "conversation_tool_cost"
    __table_args__ = (
        Index(None, "project_id", "bucket"),
        # A conversation's rows of a range (the pieces the roll-up's reads take away).
        Index(None, "conversation_id", "bucket"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversation.id", ondelete="CASCADE"))
    bucket: Mapped[datetime] = mapped_column(UTCDateTime)
    function_name: Mapped[str] = mapped_column(String(255))
    results: Mapped[int] = mapped_column(BigInteger, default=0)
    result_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    sends: Mapped[int] = mapped_column(BigInteger, default=0)
    resent_input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    unpriced_input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_femto: Mapped[int] = mapped_column(BigInteger, default=0)
    estimated_femto: Mapped[int] = mapped_column(BigInteger, default=0)


class ProjectToolCost(db.Model):
    """The stored tool costs (``conversation_tool_cost``) of one project, tool and hour, summed
    over its conversations; ``pieces``: how many rows are summed (none: the row goes). Kept in
    step by the writes of those rows (``webapp.ingest.tool_cost_rollup``)."""

    __tablename__ = "project_tool_cost"
    __table_args__ = (UniqueConstraint("project_id", "bucket", "function_name"),)

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    bucket: Mapped[datetime] = mapped_column(UTCDateTime)
    function_name: Mapped[str] = mapped_column(String(255))
    pieces: Mapped[int] = mapped_column(BigInteger, default=0)
    results: Mapped[int] = mapped_column(BigInteger, default=0)
    result_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    sends: Mapped[int] = mapped_column(BigInteger, default=0)
    resent_input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    unpriced_input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_femto: Mapped[int] = mapped_column(BigInteger, default=0)
    estimated_femto: Mapped[int] = mapped_column(BigInteger, default=0)


# --- OTLP ingestion (docs/otlp.md): raw spans and log records, and what the projector owns ----


class OtelSpan(db.Model):
    """A span as received over OTLP, keyed by (project, trace, span). Content attributes are
    not kept verbatim: they live parsed and redacted in `record` (the normalized record)."""

    __tablename__ = "otel_span"
    __table_args__ = (
        UniqueConstraint("project_id", "trace_id", "span_id"),
        # Purge of unattached spans and the statistics read by age.
        Index(None, "project_id", "received_at"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    trace_id: Mapped[str] = mapped_column(String(32))
    span_id: Mapped[str] = mapped_column(String(16))
    parent_span_id: Mapped[str] = mapped_column(String(16), default="")
    name: Mapped[str] = mapped_column(Text, default="")
    kind: Mapped[int] = mapped_column(Integer, default=0)
    start_ns: Mapped[int] = mapped_column(BigInteger)
    end_ns: Mapped[int] = mapped_column(BigInteger)
    status_code: Mapped[int] = mapped_column(Integer, default=0)
    status_message: Mapped[str] = mapped_column(Text, default="")
    scope_name: Mapped[str] = mapped_column(Text, default="")
    scope_version: Mapped[str] = mapped_column(Text, default="")
    service_name: Mapped[str] = mapped_column(Text, default="")
    # tool, agent, llm or other (docs/otlp-mapping.md, 'Which spans are model calls').
    span_class: Mapped[str] = mapped_column(String(8))
    resource: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    events: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    links: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    record: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    # SHA-256 of what was received: a re-sent span with other content is told apart.
    digest: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class OtelLog(db.Model):
    """A GenAI log record as received over OTLP, keyed by (project, trace, span, fingerprint)."""

    __tablename__ = "otel_log"
    __table_args__ = (
        UniqueConstraint("project_id", "trace_id", "span_id", "fingerprint"),
        Index(None, "project_id", "received_at"),
    )

    id: Mapped[int] = mapped_column(RowId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    # "" for a record attached to no span.
    trace_id: Mapped[str] = mapped_column(String(32))
    span_id: Mapped[str] = mapped_column(String(16))
    fingerprint: Mapped[str] = mapped_column(String(64))
    event_name: Mapped[str] = mapped_column(Text)
    time_ns: Mapped[int] = mapped_column(BigInteger)
    observed_ns: Mapped[int] = mapped_column(BigInteger)
    service_name: Mapped[str] = mapped_column(Text, default="")
    attributes: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    record: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class OtelLink(db.Model):
    """What ties traces together for the projection: a tool-call id, a call signature or a
    conversation id that records of the trace mention (hashed, so any value fits). The traces
    that share a link are projected together."""

    __tablename__ = "otel_link"
    __table_args__ = (Index(None, "project_id", "trace_id"),)

    project_id: Mapped[int] = mapped_column(
        ForeignKey("project.id", ondelete="CASCADE"), primary_key=True
    )
    link: Mapped[str] = mapped_column(String(64), primary_key=True)
    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)


class OtelTurn(db.Model):
    """A turn the OTLP projector wrote: it owns the turn's messages (and their calls and usage)
    and recognises an unchanged turn by its digest."""

    __tablename__ = "otel_turn"
    __table_args__ = (UniqueConstraint("project_id", "turn_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    turn_key: Mapped[str] = mapped_column(String(120))
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE"), index=True
    )
    user_message_id: Mapped[int | None] = mapped_column(BigInteger)
    assistant_message_id: Mapped[int] = mapped_column(BigInteger)
    digest: Mapped[str] = mapped_column(String(64))
    # Content not captured by the agent's instrumentation (the page shows a hint).
    content_captured: Mapped[bool] = mapped_column(Boolean, default=True)


class OtelTurnTrace(db.Model):
    """The traces of a turn (usually one; bare per-call instrumentations make several)."""

    __tablename__ = "otel_turn_trace"
    __table_args__ = (Index(None, "project_id", "trace_id"),)

    turn_id: Mapped[int] = mapped_column(
        ForeignKey("otel_turn.id", ondelete="CASCADE"), primary_key=True
    )
    trace_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))


# --- Full-text search of tool calls (the calls explorer, docs/dashboard.md) ------------------
#
# Each database's own engine, kept in step by the database itself within the writing
# transaction, so no write path can miss it (native and MessageTool writes, imports, the OTLP
# projector's inserts, updates and deletes, purge and conversation deletes by cascade, the
# bench's raw inserts):
#
# * SQLite: a contentless FTS5 table (rowid = tool_invocation.id) filled by triggers. Contentless,
#   because the text is already in tool_invocation; detail=none, because a search is an AND of
#   words: the index holds which calls contain a word, not where.
# * PostgreSQL: a stored generated tsvector column and a GIN index over it: nothing to keep in
#   step.
#   tsvector (words), not pg_trgm (substrings): people search for words of an error or a
#   result, and a trigram index of every result would be several times the size of the text.
#
# Both index the first SEARCH_CHARS characters of the arguments (JSON text) and of the result:
# PostgreSQL refuses a tsvector over 1 MB, and a result that long is not read, it is searched
# for a phrase near its start. Words, not stems ('simple' / unicode61): tool output is ids,
# code and mixed languages. Both split words at ASCII punctuation and white space
# (PostgreSQL's parser would keep `api.example.com` or `a_b` whole; the column's expression
# turns punctuation into spaces first), so `example` finds `api.example.com` on both
# (webapp.sql.search_words splits a search the same way). The migration that adds them fills
# them for existing rows; the
# statements are frozen there as they are here.

SEARCH_CHARS = 100_000
CALL_FTS = "tool_call_fts"

_FTS_VALUES = "substr({row}.arguments, 1, {n}), substr({row}.response, 1, {n})"


def _fts_values(row: str) -> str:
    return _FTS_VALUES.format(row=row, n=SEARCH_CHARS)


SQLITE_SEARCH_DDL = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {CALL_FTS} USING fts5("
    "arguments, response, content='', detail=none, tokenize='unicode61 remove_diacritics 2')",
    f"CREATE TRIGGER IF NOT EXISTS {CALL_FTS}_insert AFTER INSERT ON tool_invocation BEGIN "
    f"INSERT INTO {CALL_FTS}(rowid, arguments, response) VALUES (new.id, {_fts_values('new')}); "
    "END",
    f"CREATE TRIGGER IF NOT EXISTS {CALL_FTS}_delete AFTER DELETE ON tool_invocation BEGIN "
    f"INSERT INTO {CALL_FTS}({CALL_FTS}, rowid, arguments, response) "
    f"VALUES ('delete', old.id, {_fts_values('old')}); END",
    f"CREATE TRIGGER IF NOT EXISTS {CALL_FTS}_update AFTER UPDATE OF arguments, response "
    f"ON tool_invocation BEGIN "
    f"INSERT INTO {CALL_FTS}({CALL_FTS}, rowid, arguments, response) "
    f"VALUES ('delete', old.id, {_fts_values('old')}); "
    f"INSERT INTO {CALL_FTS}(rowid, arguments, response) VALUES (new.id, {_fts_values('new')}); "
    "END",
)
SQLITE_SEARCH_DROP = (f"DROP TABLE IF EXISTS {CALL_FTS}",)

# What PostgreSQL indexes: a stored generated column (computed once per write, so a row is
# checked without recomputing it) and a GIN index over it.
PG_SEARCH_COLUMN = "search_document"
PG_SEARCH_EXPRESSION = (
    "to_tsvector('simple'::regconfig, regexp_replace("
    f"left(coalesce(arguments::text, ''), {SEARCH_CHARS}) || ' ' || "
    f"left(coalesce(response, ''), {SEARCH_CHARS}), "
    r"'[!-/:-@\[-`{-~]+', ' ', 'g'))"
)
PG_SEARCH_DOCUMENT = f"tool_invocation.{PG_SEARCH_COLUMN}"
PG_SEARCH_INDEX = "ix_tool_invocation_search"
PG_SEARCH_DDL = (
    f"ALTER TABLE tool_invocation ADD COLUMN IF NOT EXISTS {PG_SEARCH_COLUMN} tsvector "
    f"GENERATED ALWAYS AS ({PG_SEARCH_EXPRESSION}) STORED",
    f"CREATE INDEX IF NOT EXISTS {PG_SEARCH_INDEX} ON tool_invocation "
    f"USING gin ({PG_SEARCH_COLUMN})",
)


# --- The calls explorer's sort indexes ---------------------------------------------------------
#
# The explorer (webapp.queries.call_explorer) sorts a project's calls by duration and by result
# size, keyset-paged on (key, id). These indexes hold exactly its sort keys, after the project:
# a page walks the index from the cursor on, whatever the number of calls, as the time sort
# walks (project_id, created_at, id). The explorer writes its keys as these same texts (with the
# table's name): SQLite uses an index on an expression only for the very same expression, and
# never for one with bound parameters. The duration is `webapp.sql.duration_ms`'s (exact to the
# microsecond), -1 without one; the size -1 without one.
_CALL_DURATION_KEY = {
    "sqlite": "coalesce(round((julianday(substr({t}ended_at, 1, 19)) - "
    "julianday(substr({t}started_at, 1, 19))) * 86400.0) * 1000.0 + "
    "(CAST(substr({t}ended_at, 21, 6) AS INTEGER) - "
    "CAST(substr({t}started_at, 21, 6) AS INTEGER)) / 1000.0, -1.0)",
    "postgresql": "coalesce(CAST(EXTRACT(epoch FROM {t}ended_at - {t}started_at) AS FLOAT) "
    "* 1000.0, -1.0)",
}
_CALL_SIZE_KEY = "coalesce({t}response_bytes, -1)"
CALL_SORT_INDEXES = {
    "ix_tool_invocation_duration": "duration",
    "ix_tool_invocation_size": "size",
}


def call_sort_key_sql(sort: str, dialect: str, table: str = "tool_invocation") -> str:
    """The SQL text of the explorer's ``duration`` or ``size`` key (``table`` "" for an index)."""
    prefix = f"{table}." if table else ""
    key = _CALL_DURATION_KEY[dialect] if sort == "duration" else _CALL_SIZE_KEY
    return key.format(t=prefix)


def call_sort_index_ddl(dialect: str) -> tuple[str, ...]:
    return tuple(
        f"CREATE INDEX IF NOT EXISTS {name} ON tool_invocation "
        f"(project_id, ({call_sort_key_sql(sort, dialect, '')}), id)"
        for name, sort in CALL_SORT_INDEXES.items()
    )


def is_search_object(name: str | None) -> bool:
    """The search objects above and the explorer's expression indexes, which the models do not
    declare (Alembic's comparison of models and migrations leaves them out)."""
    return bool(name) and (
        name.startswith(CALL_FTS)
        or name in (PG_SEARCH_INDEX, PG_SEARCH_COLUMN)
        or name in CALL_SORT_INDEXES
    )


def _after_table_create(table: Any, sqlite: tuple[str, ...], postgresql: tuple[str, ...]) -> None:
    """Run each database's statements after ``table`` is made (by ``create_all``)."""
    for statement in sqlite:
        event.listen(table, "after_create", DDL(statement).execute_if(dialect="sqlite"))
    for statement in postgresql:
        event.listen(table, "after_create", DDL(statement).execute_if(dialect="postgresql"))


_after_table_create(ToolInvocation.__table__, SQLITE_SEARCH_DDL, PG_SEARCH_DDL)
_after_table_create(
    ToolInvocation.__table__, call_sort_index_ddl("sqlite"), call_sort_index_ddl("postgresql")
)
for _statement in SQLITE_SEARCH_DROP:
    event.listen(
        ToolInvocation.__table__, "before_drop", DDL(_statement).execute_if(dialect="sqlite")
    )


# --- A tool call row's stamp ---------------------------------------------------------------
#
# ToolInvocation.stamp changes with every write to the row, so the replay's loader can tell a
# row it made objects of before from one changed since without reading its texts. The write
# paths (webapp.ingest.calls, the token pass) set a new one themselves; these triggers give one
# to any other insert or update that leaves it as it was (SQL by hand, another tool), so no
# path can change a row and keep its stamp. SQLite's trigger is an UPDATE of the row, so the
# write paths setting their own is what keeps it off the ingestion path.

ROW_STAMP_FUNCTION = "tool_invocation_stamp"
SQLITE_ROW_STAMP_DDL = (
    "CREATE TRIGGER IF NOT EXISTS tool_invocation_stamp_insert AFTER INSERT ON tool_invocation "
    "WHEN new.stamp IS NULL BEGIN "
    "UPDATE tool_invocation SET stamp = random() WHERE id = new.id; END",
    "CREATE TRIGGER IF NOT EXISTS tool_invocation_stamp_update AFTER UPDATE ON tool_invocation "
    "WHEN new.stamp IS old.stamp BEGIN "
    "UPDATE tool_invocation SET stamp = random() WHERE id = new.id; END",
)
PG_ROW_STAMP_DDL = (
    f"CREATE OR REPLACE FUNCTION {ROW_STAMP_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN NEW.stamp := floor(random() * 4611686018427387904)::bigint; RETURN NEW; END $$",
    "CREATE OR REPLACE TRIGGER tool_invocation_stamp_insert BEFORE INSERT ON tool_invocation "
    f"FOR EACH ROW WHEN (NEW.stamp IS NULL) EXECUTE FUNCTION {ROW_STAMP_FUNCTION}()",
    "CREATE OR REPLACE TRIGGER tool_invocation_stamp_update BEFORE UPDATE ON tool_invocation "
    "FOR EACH ROW WHEN (NEW.stamp IS NOT DISTINCT FROM OLD.stamp) "
    f"EXECUTE FUNCTION {ROW_STAMP_FUNCTION}()",
)
_after_table_create(ToolInvocation.__table__, SQLITE_ROW_STAMP_DDL, PG_ROW_STAMP_DDL)

# --- What an API request's authentication and redaction depend on, as one number -------------
#
# Each worker keeps the API keys and the redaction rules it has read (webapp.auth), and checks
# them with one single-row read per request instead of reading the key, its project and the
# rules again. The number is bumped by the database itself, in the transaction that changes
# what the API depends on (a key revoked, re-hashed, moved or deleted; a project's price
# overrides changed or the project deleted; a rule added, changed or deleted), so every path
# bumps it: the settings pages, `toolscope keys revoke`, another server, SQL by hand. A new key
# needs no bump: unknown keys are never cached. The key's last_used_at does not bump it.


class ApiState(db.Model):
    """One row (id 1), or none: no row reads as version 0 (a TRUNCATE leaves none)."""

    __tablename__ = "api_state"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


# (table, event): the changes that bump the version.
API_STATE_EVENTS = (
    ("api_key", "UPDATE OF key_hash, revoked_at, project_id"),
    ("api_key", "DELETE"),
    ("project", "UPDATE OF price_overrides"),
    ("project", "DELETE"),
    ("redaction_rule", "INSERT"),
    ("redaction_rule", "UPDATE"),
    ("redaction_rule", "DELETE"),
)


def version_triggers(
    state: str, events: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The SQLite and the PostgreSQL statements that make each (table, event) of ``events``
    bump the one-row table ``state``'s version (api_state, replay_state). The migrations that
    made them keep their own frozen copies."""
    # An upsert, so that a missing row (version 0) becomes 1.
    bump = (
        f"INSERT INTO {state} (id, version) VALUES (1, 1) "
        f"ON CONFLICT (id) DO UPDATE SET version = {state}.version + 1"
    )

    def name(table: str, when: str) -> str:
        return f"{state}_{table}_{when.split()[0].lower()}"

    sqlite = tuple(
        f"CREATE TRIGGER IF NOT EXISTS {name(table, when)} AFTER {when} ON {table} "
        f"BEGIN {bump}; END"
        for table, when in events
    )
    # PostgreSQL: one statement-level trigger per change (one bump per statement, not per row).
    postgresql = (
        f"CREATE OR REPLACE FUNCTION {state}_bump() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN {bump}; RETURN NULL; END $$",
        *(
            f"CREATE OR REPLACE TRIGGER {name(table, when)} AFTER {when} ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {state}_bump()"
            for table, when in events
        ),
    )
    return sqlite, postgresql


def _after_create(sqlite: tuple[str, ...], postgresql: tuple[str, ...]) -> None:
    """Run the statements after every table is made (create_all runs this even when the
    tables existed, and the triggers name other tables)."""
    for statement in sqlite:
        event.listen(db.metadata, "after_create", DDL(statement).execute_if(dialect="sqlite"))
    for statement in postgresql:
        event.listen(db.metadata, "after_create", DDL(statement).execute_if(dialect="postgresql"))


SQLITE_API_STATE_DDL, PG_API_STATE_DDL = version_triggers("api_state", API_STATE_EVENTS)
_after_create(SQLITE_API_STATE_DDL, PG_API_STATE_DDL)


# --- What invalidates every cached replay at once ------------------------------------------
#
# A conversation's cached replays are keyed by its row id and revision
# (webapp.services.replay_cache).
# SQLite may give a deleted conversation's row id to the next one, whose revision starts at 0
# again: deleting a conversation, by any path (the API, `toolscope conversations delete`, the
# demo's reload, SQL by hand), bumps this number, which every cache check reads.


class ReplayState(db.Model):
    """One row (id 1), or none: no row reads as version 0."""

    __tablename__ = "replay_state"

    id: Mapped[int] = mapped_column(primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)


REPLAY_STATE_EVENTS = (("conversation", "DELETE"),)
SQLITE_REPLAY_STATE_DDL, PG_REPLAY_STATE_DDL = version_triggers("replay_state", REPLAY_STATE_EVENTS)
_after_create(SQLITE_REPLAY_STATE_DDL, PG_REPLAY_STATE_DDL)


# --- Runs: replays sent to a model (issue 25; docs/runs.md, 'Runs') ----------------------------

MODEL_RUN_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
STUDY_STATUSES = ("draft", "queued", "running", "succeeded", "failed", "cancelled")


class Study(db.Model):
    """A what-if over many conversations: its runs are `model_run` rows with its id. The table
    only for now (the studies feature fills it): the spec as given, the report when done, the
    spending cap and the counts of its runs."""

    __tablename__ = "study"
    __table_args__ = (Index(None, "project_id", "created_at"),)

    # Public: "study_" and random characters.
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("project.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    report: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    max_cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(18, 9))
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(18, 9))
    runs_total: Mapped[int] = mapped_column(Integer, default=0)
    runs_done: Mapped[int] = mapped_column(Integer, default=0)
    runs_failed: Mapped[int] = mapped_column(Integer, default=0)
    # At most this many of its runs are `running` at once (the run worker's claim checks it);
    # no run is claimed before `backoff_until` (a provider's 429 backs the study off); why it
    # stopped early (cancelled, the spending cap reached).
    concurrency: Mapped[int] = mapped_column(Integer, default=4)
    backoff_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    message: Mapped[str | None] = mapped_column(Text)
    # While `preparing`: how many of `spec["conversations"]` have their runs stored (the run
    # worker prepares them in batches after the POST; a batch is stored with this count moved
    # on, so a worker that stops mid-batch leaves it to the next one).
    prepared: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ModelRun(db.Model):
    """One replay sent to one model connection, and what came back: a row of the durable queue
    that the run worker works through (webapp.services.run_worker). `request` is the exact body
    sent (no credential is ever part of it), `response` the provider's raw answer. A run that
    was answered from an earlier one with the same `request_key` names it in `cached_from`."""

    __tablename__ = "model_run"
    __table_args__ = (
        # A conversation's runs, newest first.
        Index(None, "conversation_id", "created_at"),
        # The queue: the oldest queued run, and running runs whose lease ran out.
        Index(None, "status", "created_at"),
        # A study's run per conversation and variant, once: a batch of its preparation
        # stored twice (two workers, a retry) cannot queue a conversation twice.
        Index(None, "study_id", "conversation_id", "variant", unique=True),
    )

    # Public: "run_" and random characters.
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("project.id", ondelete="CASCADE"), index=True
    )
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE")
    )
    connection_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_connection.id", ondelete="SET NULL"), index=True
    )
    # The connection's name when the run was made (the connection may be renamed or removed).
    connection_name: Mapped[str] = mapped_column(String(200))
    study_id: Mapped[str | None] = mapped_column(
        ForeignKey("study.id", ondelete="CASCADE"), index=True
    )
    variant: Mapped[str | None] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    model: Mapped[str] = mapped_column(String(200))
    format: Mapped[str] = mapped_column(String(32))
    # The replay options as given (replay-API names), the edits, and the resolved as_of.
    options: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    edits: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    as_of: Mapped[datetime | None] = mapped_column(UTCDateTime)
    request: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    request_key: Mapped[str] = mapped_column(String(64), index=True)
    response: Mapped[Any | None] = mapped_column(JSONType)
    next_action: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    recorded_action: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    comparison: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    input_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int | None] = mapped_column(Integer)
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(18, 9))
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    error_status: Mapped[int | None] = mapped_column(Integer)
    error_kind: Mapped[str | None] = mapped_column(String(32))
    error_message: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cached_from: Mapped[str | None] = mapped_column(String(40))
