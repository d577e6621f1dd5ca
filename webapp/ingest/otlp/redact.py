"""The project's redaction rules applied to normalized records, before anything is stored.

Tool arguments and results are redacted wherever they appear: `tool_call` and
`tool_call_response` parts of input and output messages (spans and log records alike) and the
arguments and result of tool-execution spans. A result's tool name comes from the `tool_call`
part with the same id anywhere in the request, else from the part's own `name`; when it stays
unknown only rules without a function name apply. A `skip` rule drops the content and marks the
part `skipped`, so the projection leaves the call out, as `POST /messages/tools` does.

The records are changed in place; a part or tool record that a rule changed lists the rules'
names under `redactions`.

Secrets travel outside tool calls too (docs/otlp-mapping.md, 'Redaction before storage'), so
the `mask` rules reach all other content as well: in the records, the text of every message
part, the system prompt, an agent's plain-text input, the span's name and status message; in
the raw rows (`redact_span_rows`, `redact_log_rows`), the span's name and status message and
every key and string of its attributes, its events' names and attributes, its links'
attributes and its resource's attributes, and a log record's attributes. A tool span's row gets
the mask rules of its tool; any other content only the mask rules that name no tool. Ids, names
of tools, agents, models and services, and conversation ids are left as they are: the
projection joins on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

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
    _mask_texts(records, rules)


# The record's own texts that are content (a span's name and status message are in span records
# only; a log record has neither).
_RECORD_TEXTS = ("name", "status_message", "system", "agent_input_text")


def _mask_texts(records: list[dict[str, Any]], rules: CompiledRules) -> None:
    """Mask the texts of the records that are not tool calls (message text, system prompts,
    span names...), all in one pass of each rule: a tool span's with the mask rules of its
    tool, any other with the rules that name no tool."""
    groups: dict[Any, list[tuple[dict[str, Any], str]]] = {}
    for record in records:
        tool = record.get("tool")
        policy = rules.policy_for(tool["name"]) if tool else rules.content_policy
        if not policy.masks:
            continue
        places = groups.setdefault(policy.masks, [])
        places += [(record, key) for key in _RECORD_TEXTS if record.get(key)]
        places += [(part, "content") for part in _parts(record) if part["type"] == "text"]
    for masks, places in groups.items():
        masked, names = ToolPolicy(masks=masks).mask([target[key] for target, key in places])
        if names:
            for (target, key), value in zip(places, masked, strict=True):
                target[key] = value


class _SpanRow(Protocol):
    name: str
    status_message: str
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    links: list[dict[str, Any]]
    resource: dict[str, Any]
    record: dict[str, Any]


class _LogRow(Protocol):
    attributes: dict[str, Any]


def redact_span_rows(rows: Sequence[_SpanRow], rules: CompiledRules) -> None:
    """Mask what raw span rows keep besides their records: name, status message, attributes,
    events' names and attributes, links' attributes, resource attributes. A tool span's row
    gets the mask rules of its tool, any other row the rules that name no tool."""
    if not rules.rules:
        return
    groups: dict[Any, list[_SpanRow]] = {}
    for row in rows:
        tool = row.record.get("tool")
        policy = rules.policy_for(tool["name"]) if tool else rules.content_policy
        if policy.masks:
            groups.setdefault(policy.masks, []).append(row)
    for masks, group in groups.items():
        value = [
            [
                row.name,
                row.status_message,
                row.attributes,
                [[event["name"], event["attributes"]] for event in row.events],
                [link["attributes"] for link in row.links],
                row.resource,
            ]
            for row in group
        ]
        masked, names = ToolPolicy(masks=masks).mask(value)
        if not names:
            continue
        for row, (name, status, attributes, events, links, resource) in zip(
            group, masked, strict=True
        ):
            row.name, row.status_message, row.attributes, row.resource = (
                name,
                status,
                attributes,
                resource,
            )
            row.events = [
                {**event, "name": event_name, "attributes": event_attributes}
                for event, (event_name, event_attributes) in zip(row.events, events, strict=True)
            ]
            row.links = [
                {**link, "attributes": link_attributes}
                for link, link_attributes in zip(row.links, links, strict=True)
            ]


def redact_log_rows(rows: Sequence[_LogRow], rules: CompiledRules) -> None:
    """Mask the attributes raw log rows keep besides their records (the rules that name no
    tool)."""
    if not rules.rules or not rules.content_policy.masks:
        return
    masked, names = rules.content_policy.mask([row.attributes for row in rows])
    if names:
        for row, attributes in zip(rows, masked, strict=True):
            row.attributes = attributes


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
