"""Microsoft Agent Framework with its OpenAI chat-completion client; sensitive data (content)
on unless AGENT_CAPTURE_CONTENT=0."""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import SYSTEM_PROMPT, USER_PROMPT, get_time, get_weather


async def _run() -> None:
    from agent_framework import Agent
    from agent_framework.observability import enable_instrumentation
    from agent_framework.openai import OpenAIChatCompletionClient

    content = os.environ.get("AGENT_CAPTURE_CONTENT", "1") == "1"
    enable_instrumentation(enable_sensitive_data=content)
    client = OpenAIChatCompletionClient(
        "gpt-4o-mini", api_key="sk-test", base_url=os.environ["OPENAI_BASE_URL"]
    )
    agent = Agent(
        client=client,
        name="weather_agent",
        instructions=SYSTEM_PROMPT,
        tools=[get_weather, get_time],
    )
    await agent.run(USER_PROMPT)


def main() -> None:
    providers = otel_setup.setup("agent-framework-agent")
    asyncio.run(_run())
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
