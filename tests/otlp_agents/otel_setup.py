"""OpenTelemetry SDK set-up shared by the tiny agents: real OTLP/HTTP exporters, in protobuf or
JSON, pointed at the endpoint and headers of the standard environment variables.

`OTLP_WIRE=json` picks the OTLP/JSON exporters (opentelemetry-exporter-otlp-json-http), anything
else the protobuf ones (opentelemetry-exporter-otlp-proto-http).
"""

from __future__ import annotations

import os
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def _exporters() -> tuple[Any, Any]:
    if os.environ.get("OTLP_WIRE") == "json":
        from opentelemetry.exporter.otlp.json.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter(), OTLPLogExporter()


def setup(service_name: str) -> tuple[TracerProvider, LoggerProvider]:
    """Global tracer and logger providers exporting over OTLP/HTTP; call `shutdown` at the end."""
    # A test runs several agents of one family at once and tells them apart by service name.
    resource = Resource.create({"service.name": os.environ.get("AGENT_SERVICE_NAME", service_name)})
    span_exporter, log_exporter = _exporters()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    trace.set_tracer_provider(tracer_provider)
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
    set_logger_provider(logger_provider)
    return tracer_provider, logger_provider


def shutdown(providers: tuple[TracerProvider, LoggerProvider]) -> None:
    tracer_provider, logger_provider = providers
    tracer_provider.force_flush()
    logger_provider.force_flush()
    tracer_provider.shutdown()
    logger_provider.shutdown()
