"""Output records: what the replay did (Diagnostic) and what a provider would reject (Problem).

Diagnostic kinds emitted by the replay, in the order a reader meets them:

``after_as_of``          a message or call created after ``as_of`` does not exist yet
``run_not_completed``    per-run mode: a failed/cancelled/in-progress run contributes nothing
                         (per-service-call mode: only its text is held back when the run was
                         still in progress at ``as_of``, whatever it ended as later)
``response_missing``     a call without a response at ``as_of`` is left out with its call entry
``stale``                a result older than the freshness window is left out with its call
``round_skipped``        no call of the round is left, so the whole round is skipped
``trailing_trimmed``     the run's last round was never consumed by a later service call
``id_generated``         an empty call id was replaced by a stable generated one
``id_renamed``           a duplicated or provider-invalid id was replaced by a stable one
``tool_name_renamed``    a tool name providers refuse is sent as one they accept (on each call
                         and, without a call, on the tool definition)
``redacted``             informational: the result was redacted before storage
``compacted``            uncited ``source_number`` items were dropped from a result
``truncated``            a result over the token cap was cut
``empty_message_skipped``  a user/system message with no text cannot be sent
``tool_definition_duplicate``  a second definition with the same tool name was dropped
``system_moved``         anthropic: a system message was moved into the top-level system prompt
``leading_assistant_dropped``  anthropic: messages before the first user message were dropped
``pruned``               a unit was dropped to fit the context budget
``over_budget``          still over budget after dropping everything removable
``message_merged``       anthropic: consecutive messages with the same role were merged
``empty_payload``        nothing is left to send
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One thing a replay rule changed, located on a message, round or call."""

    kind: str
    reason: str
    message_id: str | None = None
    round_index: int | None = None
    call_row_id: int | None = None
    call_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reason": self.reason,
            "message_id": self.message_id,
            "round_index": self.round_index,
            "call_row_id": self.call_row_id,
            "call_id": self.call_id,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True, slots=True)
class Problem:
    """Something in a payload that the provider would reject."""

    code: str
    message: str
    path: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "path": self.path}
