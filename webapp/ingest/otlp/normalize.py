"""One normalized record per span and per GenAI log record: what the projection reads.

`normalize_span` classifies a span (tool, agent, llm, other; the span kind is ignored) and
reads every fact from the first source that has it, in a fixed order of precedence
(docs/otlp-mapping.md, 'Where messages are read'). The record is a plain JSON-able dict; the
span's raw attributes lose their content keys: those live, parsed and redacted, in the record
only (docs/otlp-mapping.md, 'What is stored raw').

Record of a span:
    class, trace_id, span_id, parent_span_id, name, service, start_ns, end_ns, status,
    status_message, conversation_ids {key: value}, agent_name, model, provider, input_tokens,
    output_tokens, cached_tokens, finish_reasons, input, output, input_fallback,
    output_fallback, system, tools, agent_input_text, tool {id, name, arguments, result,
    error, error_text}
(keys whose value is unknown are left out.)

Log records are normalized by `genai_logs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import messages as m
from . import span_events, vercel
from .event_lists import read as read_event_lists
from .mcp import mcp_record
from .payloads import callback_arguments, tool_result
from .records import STATUS_ERROR, Span
from .turn_keys import is_graph_step

# The conversation-id keys, in precedence order (the setting may put more in front).
CONVERSATION_KEYS = (
    "gen_ai.conversation.id",
    "session.id",
    "traceloop.association.properties.session_id",
    "traceloop.association.properties.conversation_id",
    "langfuse.session.id",
    # The Vercel AI SDK: a session id in `experimental_telemetry.metadata`.
    *vercel.SESSION_KEYS,
    # The OpenAI Agents SDK's trace group ("a conversation"), as Logfire exports it.
    "group_id",
)

LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "responses"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow"})

# Content keys: never stored verbatim in the raw row.
CONTENT_KEYS = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.prompt",
        "gen_ai.completion",
        "input.value",
        "output.value",
        "pydantic_ai.all_messages",
        "final_result",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "tool.parameters",
        # pydantic-ai's instrumentation version 2: a tool span's arguments and result
        "tool_arguments",
        "tool_response",
    }
) | vercel.CONTENT_KEYS
CONTENT_PREFIXES = (
    "gen_ai.prompt.",
    "gen_ai.completion.",
    "llm.input_messages.",
    "llm.output_messages.",
)



def is_content_key(key: str) -> bool:
    return key in CONTENT_KEYS or key.startswith(CONTENT_PREFIXES)


def classify(attributes: Mapping[str, Any]) -> str:
    """tool, agent, llm or other, first match wins; the span kind is not used
    (docs/otlp-mapping.md, 'Which spans are model calls')."""
    operation = _string(attributes.get("gen_ai.operation.name"))
    openinference = _string(attributes.get("openinference.span.kind"))
    traceloop = _string(attributes.get("traceloop.span.kind"))
    if operation == "execute_tool" or openinference == "TOOL" or traceloop == "tool":
        return "tool"
    if operation in AGENT_OPERATIONS or openinference == "AGENT" or traceloop == "agent":
        return "agent"
    if (
        operation in LLM_OPERATIONS
        or openinference == "LLM"
        or _string(attributes.get("llm.request.type")) in ("chat", "completion")
    ):
        return "llm"
    return vercel.classify(attributes) or _model_with_usage(operation, attributes)


def _model_with_usage(operation: str | None, attributes: Mapping[str, Any]) -> str:
    """No operation, but a model and its usage: a model call (Logfire's Chat Completions
    spans); anything else is other."""
    if (
        operation is None
        and _string(attributes.get("gen_ai.request.model"))
        and _count(attributes.get("gen_ai.usage.input_tokens")) is not None
    ):
        return "llm"
    return "other"


def _first(attributes: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None and value != "":
            return value
    return None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    """A token count: an int (or a numeric string); anything else, NaN included, is unknown."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 2**31 else None
    if isinstance(value, float) and value.is_integer():
        return _count(int(value))
    if isinstance(value, str) and value.isdigit():
        return _count(int(value))
    return None


def _first_count(attributes: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        count = _count(attributes.get(key))
        if count is not None:
            return count
    return None


def _put(record: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        record[key] = value


def normalize_span(
    span: Span, limit: int = m.DEFAULT_PARSE_LIMIT, conversation_keys: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The normalized record of one span (content parsed, not yet redacted). The values of
    the conversation-id keys, and of `conversation_keys` (the setting), are collected."""
    return _normalize_span(span, limit, conversation_keys, {})


def normalize_span_row(
    span: Span,
    mask: Callable[[str], str],
    limit: int = m.DEFAULT_PARSE_LIMIT,
    conversation_keys: tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`normalize_span` and `raw_attributes` of one span together: the message lists are
    parsed once for both (each of a model call's was parsed twice, a third of the
    normalization's time)."""
    readable: dict[str, bool] = {}
    record = _normalize_span(span, limit, conversation_keys, readable)
    return record, raw_attributes(span.attributes, mask, limit, readable)


def _normalize_span(
    span: Span, limit: int, conversation_keys: tuple[str, ...], readable: dict[str, bool]
) -> dict[str, Any]:
    """`normalize_span`; `readable` gets, for each message-list key read, whether it was a
    readable list of messages (what `raw_attributes` asks)."""
    attrs = span.attributes
    kind = classify(attrs)
    record: dict[str, Any] = {
        "class": kind,
        "trace_id": span.trace_id,
        "span_id": span.span_id,
        "parent_span_id": span.parent_span_id,
        "name": span.name,
        "service": span.resource.service_name,
        "start_ns": span.start_ns,
        "end_ns": span.end_ns,
        "status": span.status_code,
        "status_message": span.status_message,
    }
    ids = {
        k: v
        for k, v in attrs.items()
        if (_is_conversation_key(k) or k in conversation_keys) and _string(v)
    }
    if ids:
        record["conversation_ids"] = ids
    _put(record, "agent_name", _string(attrs.get("gen_ai.agent.name")))
    # MCP spans (docs/otlp-mapping.md, 'MCP calls'): the client's is of no GenAI class.
    _put(record, "mcp", mcp_record(span.name, span.kind, attrs, span.scope_name, record["service"]))
    if kind == "other":
        return record
    _put(record, "model", _string(_first(attrs, *_MODEL_KEYS)))
    _put(record, "provider", _string(_first(attrs, *_PROVIDER_KEYS)))
    if kind == "llm":
        _usage(record, attrs)
    _messages(record, span, limit, readable)
    _put(record, "system", m.system_instructions(attrs.get("gen_ai.system_instructions"), limit))
    _put(record, "tools", tool_definitions(attrs, limit))
    if kind == "tool":
        record["tool"] = _tool(span, limit)
    if kind in ("llm", "agent"):
        # Content in span events (Strands), read as log records are.
        span_events.read(record, span, limit)
    if kind == "llm":
        # Content as a list of events in one attribute (Logfire).
        read_event_lists(record, attrs, limit)
        _put(record, "response_id", _response_id(attrs, limit))
    vercel.complete(record, span, limit)
    if kind == "agent":
        if is_graph_step(attrs):
            record["graph_step"] = True  # not a run (docs/otlp-mapping.md, 'Turns')
        text = attrs.get("input.value")
        if isinstance(text, str) and text and m.load_json(text, limit) is None:
            record["agent_input_text"] = text  # OpenInference: the agent's input as plain text
    return record


def _response_id(attrs: Mapping[str, Any], limit: int) -> str | None:
    """The provider's id of the answer: `gen_ai.response.id`, else the `id` of OpenInference's
    response body in `output.value` (docs/otlp-mapping.md, 'One model call, one round')."""
    value = _string(attrs.get("gen_ai.response.id"))
    if value is None and isinstance(attrs.get("output.value"), str):
        body = m.load_json(attrs["output.value"], limit)
        value = _string(body.get("id")) if isinstance(body, Mapping) else None
    return value


def _is_conversation_key(key: str) -> bool:
    return key in CONVERSATION_KEYS or key.startswith("traceloop.association.properties.")


_MODEL_KEYS = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.response.model_name",
    "llm.model_name",
    "llm.request.model_name",
)
_PROVIDER_KEYS = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")


def _usage(record: dict[str, Any], attrs: Mapping[str, Any]) -> None:
    # Usage is read from LLM spans only: agent spans carry the run's totals (Agent Framework,
    # pydantic-ai), and adding them would count the run twice.
    _put(
        record,
        "input_tokens",
        _first_count(
            attrs,
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
        ),
    )
    _put(
        record,
        "output_tokens",
        _first_count(
            attrs,
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
        ),
    )
    _put(
        record,
        "cached_tokens",
        _first_count(
            attrs,
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
            "llm.token_count.prompt_details.cache_read",
        ),
    )
    reasons = m.finish_reasons(attrs.get("gen_ai.response.finish_reasons"))
    if not reasons:
        reasons = _finish_from_flattened(attrs)
    _put(record, "finish_reasons", reasons or None)


def _finish_from_flattened(attrs: Mapping[str, Any]) -> list[str] | None:
    completion = _string(attrs.get("gen_ai.completion.0.finish_reason"))
    if completion:
        return [completion]
    openinference = _string(attrs.get("llm.finish_reason"))
    return [openinference] if openinference else None


def _messages(record: dict[str, Any], span: Span, limit: int, readable: dict[str, bool]) -> None:
    """Input and output messages, each from its first source. Sources 1-3 are span attributes
    (`input`/`output`); the span's log records come 4th and are merged by the projection;
    source 5 is kept apart as `*_fallback` (docs/otlp-mapping.md, 'Where messages are read')."""
    attrs = span.attributes
    inputs = m.semconv_messages(attrs.get("gen_ai.input.messages"), limit)
    readable["gen_ai.input.messages"] = inputs is not None
    if inputs is None:
        inputs = m.flattened_messages(attrs, "gen_ai.prompt", limit)
    if inputs is None:
        inputs = m.flattened_messages(attrs, "llm.input_messages", limit)
    outputs = m.semconv_messages(attrs.get("gen_ai.output.messages"), limit)
    readable["gen_ai.output.messages"] = outputs is not None
    if outputs is None:
        outputs = m.flattened_messages(attrs, "gen_ai.completion", limit)
    if outputs is None:
        outputs = m.flattened_messages(attrs, "llm.output_messages", limit)
    _put(record, "input", inputs)
    _put(record, "output", outputs)
    if record["class"] != "llm":
        return
    fallback_in, fallback_out = _fallback_messages(span, limit)
    if inputs is None:
        _put(record, "input_fallback", fallback_in)
    if outputs is None:
        _put(record, "output_fallback", fallback_out)


def _fallback_messages(span: Span, limit: int) -> tuple[Any, Any]:
    """A model call's last sources of messages: span events `gen_ai.content.prompt` and
    `gen_ai.content.completion` (semconv ≤1.26), and OpenInference's whole request/response
    bodies in `input.value`/`output.value`."""
    inputs = outputs = None
    for event in span.events:
        if event["name"] == "gen_ai.content.prompt" and inputs is None:
            inputs = m.chat_messages(event["attributes"].get("gen_ai.prompt"), limit)
        elif event["name"] == "gen_ai.content.completion" and outputs is None:
            outputs = m.chat_messages(event["attributes"].get("gen_ai.completion"), limit)
    attrs = span.attributes
    if inputs is None and isinstance(attrs.get("input.value"), str):
        body = m.load_json(attrs["input.value"], limit)
        if isinstance(body, Mapping):
            inputs = m.chat_messages(body.get("messages"), limit)
    if outputs is None and isinstance(attrs.get("output.value"), str):
        outputs = m.choice_messages(m.load_json(attrs["output.value"], limit), limit)
    return inputs, outputs


def head_system_text(inputs: list[m.Message]) -> str | None:
    texts = []
    for message in inputs:
        if message["role"] not in ("system", "developer"):
            break
        text = m.text_of(message)
        if text:
            texts.append(text)
    return "\n\n".join(texts) if texts else None


def tool_definitions(attrs: Mapping[str, Any], limit: int) -> list[dict[str, Any]] | None:
    """The tools offered to the model: `gen_ai.tool.definitions`, else OpenInference's
    `llm.tools.<i>.tool.json_schema`, else OpenLLMetry's `llm.request.functions.<i>.*`."""
    raw = attrs.get("gen_ai.tool.definitions")
    if isinstance(raw, str):
        raw = m.load_json(raw, limit)
    if isinstance(raw, list):
        found = [_definition(item) for item in raw]
        return [d for d in found if d is not None] or None
    openinference = m.unflatten(attrs, "llm.tools")
    if openinference:
        found = []
        for item in openinference:
            tool = item.get("tool") if isinstance(item, dict) else None
            if not isinstance(tool, dict):
                continue
            schema = tool.get("json_schema")
            if isinstance(schema, str):
                schema = m.load_json(schema, limit)
            definition = _definition(schema if isinstance(schema, dict) else tool)
            if definition is not None:
                found.append(definition)
        return found or None
    functions = m.unflatten(attrs, "llm.request.functions")
    if functions:
        found = []
        for item in functions:
            if isinstance(item, dict):
                parameters = item.get("parameters")
                if isinstance(parameters, str):
                    item = {**item, "parameters": m.load_json(parameters, limit)}
                definition = _definition(item)
                if definition is not None:
                    found.append(definition)
        return found or None
    return None


def _definition(item: Any) -> dict[str, Any] | None:
    """A flat `{type,name,description,parameters}`, OpenAI's `{type,function:{...}}` or
    Anthropic's `{name,description,input_schema}` (OpenLLMetry's and OpenInference's Anthropic
    instrumentations send it as it is)."""
    if not isinstance(item, Mapping):
        return None
    if isinstance(item.get("function"), Mapping):
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or not name or len(name) > 255:
        return None
    description = item.get("description")
    parameters = item.get("parameters")
    if parameters is None:
        parameters = item.get("input_schema")
    return {
        "name": name,
        "description": description if isinstance(description, str) else None,
        "parameters": parameters if isinstance(parameters, dict) else None,
    }


def _tool(span: Span, limit: int) -> dict[str, Any]:
    """The tool-execution record (docs/otlp-mapping.md, 'Tool-execution spans')."""
    attrs = span.attributes
    name = _string(_first(attrs, "gen_ai.tool.name", "tool.name", "traceloop.entity.name"))
    if name is None:
        name = span.name.removeprefix("execute_tool ").strip() or span.name
    call_id = _first(attrs, "gen_ai.tool.call.id", "tool.id", "tool_call.id")
    arguments: Any = attrs.get("gen_ai.tool.call.arguments")
    if arguments is None:
        arguments = attrs.get("tool_arguments")
    if arguments is None and attrs.get("openinference.span.kind") == "TOOL":
        arguments = attrs.get("input.value")
    if arguments is None:
        entity = attrs.get("traceloop.entity.input")
        entity = m.load_json(entity, limit) if isinstance(entity, str) else entity
        if isinstance(entity, Mapping):
            # OpenLLMetry's mcp instrumentation: {"tool_name": ..., "arguments": {...}}
            arguments = entity.get("kwargs", entity.get("inputs", entity.get("arguments")))
    result = _first(
        attrs,
        "gen_ai.tool.call.result",
        "tool_response",
        "output.value",
        "traceloop.entity.output",
    )
    error = span.status_code == STATUS_ERROR or attrs.get("error.type") is not None
    error_text = span.status_message or None
    if error and error_text is None:
        for event in span.events:
            if event["name"] == "exception":
                text = event["attributes"].get("exception.message")
                if isinstance(text, str) and text:
                    error_text = text
                    break
    # Ids and results buried in framework payloads:
    # docs/otlp-mapping.md, 'Payloads of framework tool spans'.
    arguments, buried_id = callback_arguments(arguments, limit)
    result, result_id = tool_result(result, limit)
    if call_id is None:
        call_id = buried_id or result_id
    return {
        "id": call_id if isinstance(call_id, str) else ("" if call_id is None else str(call_id)),
        "name": name,
        "arguments": m.arguments_of(arguments, limit),
        "result": m.result_of(result),
        "error": error,
        "error_text": error_text,
    }


# Content keys whose value must be a JSON list of messages for the normalizer to read it.
_MESSAGE_LIST_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages")


def raw_attributes(
    attributes: Mapping[str, Any],
    mask: Callable[[str], str],
    limit: int = m.DEFAULT_PARSE_LIMIT,
    readable: Mapping[str, bool] | None = None,
) -> dict[str, Any]:
    """The attributes as stored raw: content keys left out (the normalized record holds them,
    parsed and redacted), except message lists the normalizer could not read (not JSON, or too
    large to parse): those stay as text, through `mask`, so nothing sent is silently lost.
    `readable`: whether a message-list key's value is readable, when the normalizer has
    already read it (`normalize_span_row`)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if not is_content_key(key):
            out[key] = value
        elif key in _MESSAGE_LIST_KEYS and isinstance(value, str):
            known = readable.get(key) if readable is not None else None
            if known is None:
                known = m.semconv_messages(value, limit) is not None
            if not known:
                out[key] = mask(value)
    return out
