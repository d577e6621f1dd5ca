"""OpenLLMetry's OpenAI instrumentation (opentelemetry-instrumentation-openai): one trace per
LLM call, content on by default (TRACELOOP_TRACE_CONTENT)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import run_chat_loop


def main() -> None:
    providers = otel_setup.setup("traceloop-agent")
    from openai import OpenAI
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
    client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    run_chat_loop(client)
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
