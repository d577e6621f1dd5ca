"""The OpenAI Agents SDK (Responses or Chat Completions model) instrumented by OpenInference
(`openinference-instrumentation-openai-agents`) or by Logfire's `instrument_openai_agents()`
exporting over OTLP (`send_to_logfire=False`, the OTEL_EXPORTER_OTLP_* variables), at their
defaults (content on): the two-turn scenario of issue 21 in one session (`SQLiteSession`),
`group_id` = AGENT_CONVERSATION_ID (and OpenInference's `using_session` with the same id).

    python agent_openai_agents.py --model responses|chat --instrumentation openinference|logfire

The SDK's own trace exporter (to api.openai.com) sends nothing: no OPENAI_API_KEY is set, the
model's client gets its key directly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tools
from fake_openai import FOLLOW_UP_PROMPT


def _model(kind: str):
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    if kind == "responses":
        return OpenAIResponsesModel("gpt-4o-mini", openai_client=client)
    return OpenAIChatCompletionsModel("gpt-4o-mini", openai_client=client)


async def _run(kind: str, session_context) -> None:
    from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool

    @function_tool
    def get_weather(city: str) -> str:
        """Get weather for a city."""
        return tools.get_weather(city)

    @function_tool
    def get_time(city: str) -> str:
        """Get time for a city."""
        return tools.get_time(city)

    agent = Agent(
        name="weather_agent",
        instructions=tools.SYSTEM_PROMPT,
        model=_model(kind),
        tools=[get_weather, get_time],
    )
    conversation = os.environ.get("AGENT_CONVERSATION_ID") or "conv-openai-agents"
    session = SQLiteSession(conversation)
    config = RunConfig(group_id=conversation)
    with session_context(conversation):
        for prompt in (tools.USER_PROMPT, FOLLOW_UP_PROMPT):
            result = await Runner.run(agent, prompt, session=session, run_config=config)
            print(result.final_output)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("responses", "chat"))
    parser.add_argument("--instrumentation", choices=("openinference", "logfire"))
    args = parser.parse_args()
    service = os.environ.get("AGENT_SERVICE_NAME", "openai-agents-agent")
    if args.instrumentation == "logfire":
        import logfire

        logfire.configure(send_to_logfire=False, service_name=service, console=False)
        logfire.instrument_openai_agents()
        asyncio.run(_run(args.model, lambda _id: contextlib.nullcontext()))
        logfire.shutdown()
        return
    import otel_setup
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    providers = otel_setup.setup(service)
    OpenAIAgentsInstrumentor().instrument(tracer_provider=providers[0])
    asyncio.run(_run(args.model, using_session))
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
