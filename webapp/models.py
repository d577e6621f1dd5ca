"""The domain model of DESIGN.md as SQLAlchemy 2 typed models.

Integer primary keys (`id`) are internal row ids; the ids agents send (`external_id`,
`external_tool_call_id`) are kept apart and are unique per project, never globally, so that one
tenant can never collide with or probe another's ids.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    false,
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
    # Replay freshness window (seed 001); channels may override it.
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
    # Cost is fixed at ingestion, with the price source that produced it (prices change).
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(18, 9))
    price_source: Mapped[str | None] = mapped_column(String(64))
    price_version: Mapped[str | None] = mapped_column(String(64))


class ToolDefinition(db.Model):
    """A tool the model was offered in a conversation (name, description, JSON schema)."""

    __tablename__ = "tool_definition"
    __table_args__ = (UniqueConstraint("conversation_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversation.id", ondelete="CASCADE")
    )
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str | None] = mapped_column(Text)
    parameters: Mapped[dict[str, Any] | None] = mapped_column(JSONType)


class RedactionRule(db.Model):
    """A per-project rule applied to tool calls before they are stored (seed 001's persist hook).

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
