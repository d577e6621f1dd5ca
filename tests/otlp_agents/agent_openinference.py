"""OpenInference's OpenAI instrumentation; `--wrapped` adds manual AGENT and TOOL spans and a
session id through `using_session` (which only reaches the spans the instrumentor makes)."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import USER_PROMPT, run_chat_loop


def main() -> None:
    providers = otel_setup.setup("openinference-agent")
    from openai import OpenAI
    from openinference.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=providers[0])
    client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    if "--wrapped" in sys.argv:
        _wrapped(client, providers[0])
    else:
        run_chat_loop(client)
    otel_setup.shutdown(providers)


def _wrapped(client, tracer_provider) -> None:
    from openinference.instrumentation import using_session

    tracer = tracer_provider.get_tracer("weather-agent")

    def run_tool(call, function, arguments):
        with tracer.start_as_current_span(call.function.name) as span:
            span.set_attribute("openinference.span.kind", "TOOL")
            span.set_attribute("tool.name", call.function.name)
            span.set_attribute("tool.id", call.id)
            span.set_attribute("tool.parameters", json.dumps(arguments))
            span.set_attribute("input.value", json.dumps(arguments))
            span.set_attribute("input.mime_type", "application/json")
            result = function(**arguments)
            span.set_attribute("output.value", result)
            return result

    session = os.environ.get("AGENT_CONVERSATION_ID", "conv-openinference")
    with using_session(session), tracer.start_as_current_span("weather_agent") as agent:
        agent.set_attribute("openinference.span.kind", "AGENT")
        agent.set_attribute("input.value", USER_PROMPT)
        agent.set_attribute("output.value", run_chat_loop(client, on_tool=run_tool))


if __name__ == "__main__":
    main()
