"""OTel contrib openai-v2 instrumentation; `--wrapped` adds util-genai's agent and tool spans."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_AND_EVENT")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import run_chat_loop


def main() -> None:
    providers = otel_setup.setup("openai-v2-agent")
    from openai import OpenAI
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument()
    client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    if "--wrapped" in sys.argv:
        _wrapped(client)
    else:
        run_chat_loop(client)
    otel_setup.shutdown(providers)


def _wrapped(client) -> None:
    """util-genai's TelemetryHandler: an invoke_agent root with the conversation id, and one
    execute_tool span per call, siblings of the chat spans."""
    from opentelemetry.util.genai.handler import get_telemetry_handler

    handler = get_telemetry_handler()

    def run_tool(call, function, arguments):
        with handler.tool(call.function.name, tool_call_id=call.id, tool_type="function") as tool:
            tool.arguments = arguments
            tool.tool_result = function(**arguments)
        return tool.tool_result

    with handler.invoke_local_agent(agent_name="weather_agent") as agent:
        agent.conversation_id = os.environ.get("AGENT_CONVERSATION_ID", "conv-openai-v2")
        run_chat_loop(client, on_tool=run_tool)


if __name__ == "__main__":
    main()
