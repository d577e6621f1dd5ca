"""The project's redaction rules applied to normalized records, before anything is stored.

Tool arguments and results are redacted wherever they appear: `tool_call` and
`tool_call_response` parts of input and output messages (spans and log records alike) and the
arguments and result of tool-execution spans. A result's tool name comes from the `tool_call`
part with the same id anywhere in the request, else from the part's own `name`; when it stays
unknown only rules without a function name apply. A `skip` rule drops the content and marks the
part `skipped`, so the projection leaves the call out, as `POST /messages/tools` does.

The records are changed in place; a part or tool record that a rule changed lists the rules'
names under `redactions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ...redaction import CompiledRules, ToolPolicy, compile_rules

_MESSAGE_FIELDS = ("input", "output", "input_fallback", "output_fallback")


def _parts(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for name in _MESSAGE_FIELDS:
        for message in record.get(name) or ():
            yield from message["parts"]
    message = record.get("message")
    if message:
        yield from message["parts"]


def _unnamed_policy(rules: CompiledRules) -> ToolPolicy:
    """The rules that name no tool: what applies to a result whose tool is unknown."""
    general = compile_rules(tuple(r for r in rules.rules if r.function_name is None))
    return general.policy_for("")


def masker(rules: CompiledRules) -> Any:
    """A function that masks a content value the normalizer could not read (mask rules without
    a tool name only: there is no tool to match and nothing structured to walk)."""
    masks = _unnamed_policy(rules).masks
    if not masks:
        return lambda text: text
    policy = ToolPolicy(masks=masks)
    return lambda text: policy.apply(None, text).response


def redact_records(records: Iterable[dict[str, Any]], rules: CompiledRules) -> None:
    """Apply `rules` to every tool argument and result inside `records` (spans and logs)."""
    if not rules.rules:
        return
    records = list(records)
    names: dict[str, str] = {}
    for record in records:
        for part in _parts(record):
            if part["type"] == "tool_call" and part["id"] and part["name"]:
                names.setdefault(part["id"], part["name"])
        tool = record.get("tool")
        if tool and tool["id"] and tool["name"]:
            names.setdefault(tool["id"], tool["name"])
    unnamed = _unnamed_policy(rules)
    for record in records:
        for part in _parts(record):
            if part["type"] == "tool_call":
                _redact_call(part, rules.policy_for(part["name"]))
            elif part["type"] == "tool_call_response":
                name = names.get(part["id"]) if part["id"] else None
                name = name or part.get("name")
                _redact_response(part, rules.policy_for(name) if name else unnamed)
        if record.get("tool"):
            _redact_tool(record["tool"], rules.policy_for(record["tool"]["name"]))


def _note(target: dict[str, Any], rule_names: list[str]) -> None:
    if rule_names:
        known = target.setdefault("redactions", [])
        known.extend(n for n in rule_names if n not in known)


def _redact_call(part: dict[str, Any], policy: ToolPolicy) -> None:
    if policy.is_noop:
        return
    redacted = policy.apply(part["arguments"], None)
    if redacted.skipped_by is not None:
        part["arguments"], part["skipped"] = None, redacted.skipped_by
        return
    part["arguments"] = redacted.arguments
    _note(part, redacted.rule_names)


def _redact_response(part: dict[str, Any], policy: ToolPolicy) -> None:
    if policy.is_noop:
        return
    redacted = policy.apply(None, part["response"])
    if redacted.skipped_by is not None:
        part["response"], part["skipped"] = None, redacted.skipped_by
        return
    part["response"] = redacted.response
    _note(part, redacted.rule_names)


def _redact_tool(tool: dict[str, Any], policy: ToolPolicy) -> None:
    if policy.is_noop:
        return
    redacted = policy.apply(tool["arguments"], tool["result"])
    if redacted.skipped_by is not None:
        tool["arguments"] = tool["result"] = tool["error_text"] = None
        tool["skipped"] = redacted.skipped_by
        return
    tool["arguments"], tool["result"] = redacted.arguments, redacted.response
    names = list(redacted.rule_names)
    if tool.get("error_text"):
        error = policy.apply(None, tool["error_text"])
        tool["error_text"] = error.response
        names += [n for n in error.rule_names if n not in names]
    _note(tool, names)
