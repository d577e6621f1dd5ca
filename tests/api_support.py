"""Helpers shared by the API and ingestion tests: request builders and raw row counts."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from webapp.db import db
from webapp.errors import error_type

TABLES = ("conversation", "message", "tool_invocation", "service_call", "tool_definition")


def tool_item(
    round_index: int = 0,
    sequence_index: int = 0,
    *,
    name: str = "get_weather",
    call_id: str | None = None,
    arguments: dict[str, Any] | None = None,
    response: str | None = None,
) -> dict[str, Any]:
    """A MessageTool ToolItem (camelCase), as the SDK sends it."""
    item: dict[str, Any] = {
        "externalToolCallId": call_id
        if call_id is not None
        else f"call_{round_index}_{sequence_index}",
        "functionName": name,
        "arguments": arguments if arguments is not None else {"city": "Zurich"},
        "roundIndex": round_index,
        "sequenceIndex": sequence_index,
    }
    if response is not None:
        item["response"] = {"content": response}
    return item


def native_call(
    round_index: int = 0,
    sequence_index: int = 0,
    *,
    response: str | dict[str, Any] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A native ToolCall (snake_case); `response` is the content or the whole response."""
    call: dict[str, Any] = {
        "id": f"call_{round_index}_{sequence_index}",
        "name": "search",
        "arguments": {"q": "revenue"},
        "round_index": round_index,
        "sequence_index": sequence_index,
        **fields,
    }
    if response is not None:
        call["response"] = response if isinstance(response, dict) else {"content": response}
    return call


def row_counts(app) -> dict[str, int]:
    """Rows per table, read with raw SQL: what really reached the database."""
    with app.app_context(), db.engine.connect() as conn:
        return {t: conn.exec_driver_sql(f"SELECT COUNT(*) FROM {t}").scalar() for t in TABLES}


def raw_rows(app, sql: str) -> list[tuple[Any, ...]]:
    with app.app_context(), db.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql))]


def assert_error(response, status: int, code: str, *, field: str | None = None) -> dict:
    """The JSON error document, `{"error": {"message", "type", "code", "param", "details"}}`,
    with this `code` and, if given, `field` among the details. Returns the error object."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == code, body
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == error_type(status)
    details = error.get("details") or []
    assert error["param"] == ((details[0].get("field") or None) if details else None), body
    if field is not None:
        assert field in [d.get("field") for d in details], body
    return error
