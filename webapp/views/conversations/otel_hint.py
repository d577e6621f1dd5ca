"""The hint a conversation page shows when its agent did not capture message content: which
switch turns content on for the instrumentation family that sent the spans (docs/otlp.md).
Pure: the view passes the instrumentation scope names of the conversation's LLM spans."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContentHint:
    family: str
    switch: str


# (scope name prefix, family, the switch); the first match wins.
_FAMILIES = (
    (
        "opentelemetry.instrumentation.openai_v2",
        "OpenTelemetry openai-v2",
        "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY",
    ),
    (
        "opentelemetry.util.genai",
        "OpenTelemetry GenAI utilities",
        "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental and "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY",
    ),
    ("opentelemetry.instrumentation.openai", "OpenLLMetry", "TRACELOOP_TRACE_CONTENT=true"),
    ("traceloop", "OpenLLMetry", "TRACELOOP_TRACE_CONTENT=true"),
    (
        "openinference",
        "OpenInference",
        "unset OPENINFERENCE_HIDE_INPUTS and OPENINFERENCE_HIDE_OUTPUTS",
    ),
    ("pydantic-ai", "pydantic-ai", "InstrumentationSettings(include_content=True)"),
    ("logfire", "pydantic-ai (Logfire)", "InstrumentationSettings(include_content=True)"),
    (
        "agent_framework",
        "Microsoft Agent Framework",
        "enable_instrumentation(enable_sensitive_data=True) or ENABLE_SENSITIVE_DATA=true",
    ),
    (
        "@opentelemetry/instrumentation-openai",
        "OpenTelemetry Node OpenAI",
        "new OpenAIInstrumentation({ captureMessageContent: true }) or "
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true",
    ),
)

GENERIC = ContentHint(
    "OpenTelemetry GenAI",
    "the content switch of your instrumentation (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_"
    "CONTENT for the OpenTelemetry ones)",
)


def content_hint(scope_names: Iterable[str]) -> ContentHint:
    """The hint for the first scope name that names a known family, else a generic one."""
    for scope in scope_names:
        for prefix, family, switch in _FAMILIES:
            if scope.startswith(prefix):
                return ContentHint(family, switch)
    return GENERIC
