"""Request models → the write path's drafts, each carrying its field path for error messages."""

from __future__ import annotations

from collections.abc import Sequence

from flask import current_app

from ..errors import ApiError
from ..ingest import CallDraft, Invalid, MessageDraft, UsageDraft
from . import schemas


def check_count(field_path: str, count: int, setting: str, what: str) -> None:
    """413 when a request carries more items than the setting allows: too large, as a body over
    MAX_BODY_BYTES is, not invalid (the limit is the server's setting, in `GET /meta`, and may
    count across lists, so the document cannot state it)."""
    limit = current_app.config[setting]
    if count > limit:
        message = f"{count} {what} in one request; the limit is {limit}"
        details = [{"field": field_path, "message": message, "limit": limit}]
        raise ApiError(413, f"{field_path}: {message}", details)


def sdk_calls(tools: Sequence[schemas.ToolItem]) -> list[CallDraft]:
    return [
        CallDraft(
            field=f"tools.{i}",
            round_index=t.roundIndex,
            sequence_index=t.sequenceIndex,
            external_id=t.externalToolCallId,
            function_name=t.functionName,
            arguments=t.arguments,
            response=t.response.content if t.response is not None else None,
        )
        for i, t in enumerate(tools)
    ]


def _call(
    field_path: str,
    call: schemas.ToolCallIn | schemas.RoundCallIn,
    round_index: int,
    sequence_index: int,
) -> CallDraft:
    response = call.response
    return CallDraft(
        field=field_path,
        round_index=round_index,
        sequence_index=sequence_index,
        external_id=call.id,
        function_name=call.name,
        arguments=call.arguments,
        response=response.content if response is not None else None,
        is_error=response.is_error if response is not None else False,
        created_at=call.created_at,
        started_at=call.started_at,
        ended_at=call.ended_at,
        response_created_at=response.created_at if response is not None else None,
    )


def native_calls(prefix: str, calls: Sequence[schemas.ToolCallIn]) -> list[CallDraft]:
    return [_call(f"{prefix}.{i}", c, c.round_index, c.sequence_index) for i, c in enumerate(calls)]


def round_calls(
    prefix: str, round_index: int, calls: Sequence[schemas.RoundCallIn]
) -> list[CallDraft]:
    """Calls of one round; a call without sequence_index takes its position in the list."""
    return [
        _call(
            f"{prefix}.{i}",
            c,
            round_index,
            c.sequence_index if c.sequence_index is not None else i,
        )
        for i, c in enumerate(calls)
    ]


def usage_draft(
    field_path: str,
    usage: schemas.UsageIn | schemas.RoundUsageIn,
    round_index: int,
) -> UsageDraft:
    return UsageDraft(
        field=field_path,
        round_index=round_index,
        model=usage.model,
        provider=usage.provider,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cached_tokens,
        created_at=usage.created_at,
        started_at=usage.started_at,
        ended_at=usage.ended_at,
        content=usage.content,
        reasoning=usage.reasoning,
    )


def _assistant_only(field_path: str, role: str, what: str, present: bool) -> None:
    if present and role != "assistant":
        raise Invalid(field_path, f"only assistant messages have {what}; this one is {role}")


def message(prefix: str, m: schemas.MessageIn) -> MessageDraft:
    _assistant_only(f"{prefix}.tool_calls", m.role, "tool_calls", bool(m.tool_calls))
    _assistant_only(f"{prefix}.status", m.role, "a run status", m.status is not None)
    _assistant_only(f"{prefix}.usage", m.role, "usage", bool(m.usage))
    return MessageDraft(
        field=prefix,
        external_id=m.id,
        role=m.role,
        content=m.content,
        created_at=m.created_at,
        status=m.status,
        model=m.model,
        calls=native_calls(f"{prefix}.tool_calls", m.tool_calls or []),
        usage=[
            usage_draft(f"{prefix}.usage.{i}", u, u.round_index)
            for i, u in enumerate(m.usage or [])
        ],
    )


def turn_user(m: schemas.TurnUserIn) -> MessageDraft:
    return MessageDraft(
        field="user", external_id=m.id, role=m.role, content=m.content, created_at=m.created_at
    )


def turn_assistant(a: schemas.TurnAssistantIn) -> MessageDraft:
    calls: list[CallDraft] = []
    usage = [
        usage_draft(f"assistant.usage.{i}", u, u.round_index) for i, u in enumerate(a.usage or [])
    ]
    for r, round_in in enumerate(a.rounds):
        calls += round_calls(f"assistant.rounds.{r}.calls", r, round_in.calls)
        if round_in.usage is not None:
            usage.append(usage_draft(f"assistant.rounds.{r}.usage", round_in.usage, r))
    return MessageDraft(
        field="assistant",
        external_id=a.id,
        role="assistant",
        content=a.content,
        created_at=a.created_at,
        status=a.status,
        model=a.model,
        calls=calls,
        usage=usage,
    )
