"""SQL helpers of the write path: tables, dialect-specific INSERT, pre-serialized JSON values."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import FunctionElement

from .db import JSONType, db
from .models import Channel, Conversation, Message, ServiceCall, ToolDefinition, ToolInvocation

TOOL = ToolInvocation.__table__
MESSAGE = Message.__table__
CONVERSATION = Conversation.__table__
SERVICE_CALL = ServiceCall.__table__
CHANNEL = Channel.__table__
TOOL_DEFINITION = ToolDefinition.__table__


class json_from_text(FunctionElement[Any]):
    """A JSON column value given as JSON text: serialized once by us, not again by the driver."""

    type = JSONType
    inherit_cache = True
    name = "json_from_text"


@compiles(json_from_text)
def _json_from_text_default(element: json_from_text, compiler: Any, **kw: Any) -> str:
    return compiler.process(element.clauses, **kw)


@compiles(json_from_text, "postgresql")
def _json_from_text_pg(element: json_from_text, compiler: Any, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS JSONB)"


def dialect_insert(table: Any, dialect: str | None = None) -> Any:
    """INSERT with the dialect's ON CONFLICT support (the session's dialect by default)."""
    dialect = dialect or db.session.get_bind().dialect.name
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)
