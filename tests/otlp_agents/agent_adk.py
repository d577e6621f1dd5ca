"""The two-turn weather agent on Google ADK (issue 21): an `LlmAgent` whose model is LiteLLM's
`openai/gpt-4o-mini` pointed at the fake OpenAI server, run twice in one session by an
`InMemoryRunner`. ADK traces itself through the global tracer provider; it records content only
with `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` set. The session id is ADK's own
(`AGENT_CONVERSATION_ID`, else a fixed one): ADK exports it as `gen_ai.conversation.id`.
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
import tools as weather
from fake_openai import FOLLOW_UP_PROMPT


def get_weather(city: str) -> str:
    """Get weather for a city."""
    return weather.get_weather(city)


def get_time(city: str) -> str:
    """Get time for a city."""
    return weather.get_time(city)


async def run() -> None:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    model = LiteLlm(
        model="openai/gpt-4o-mini", api_base=os.environ["OPENAI_BASE_URL"], api_key="sk-test"
    )
    agent = LlmAgent(
        name="weather_agent",
        model=model,
        instruction=weather.SYSTEM_PROMPT,
        tools=[get_weather, get_time],
    )
    runner = InMemoryRunner(agent=agent, app_name="weather")
    session_id = os.environ.get("AGENT_CONVERSATION_ID") or "adk-session-1"
    await runner.session_service.create_session(
        app_name="weather", user_id="user-1", session_id=session_id
    )
    for prompt in (weather.USER_PROMPT, FOLLOW_UP_PROMPT):
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for event in runner.run_async(
            user_id="user-1", session_id=session_id, new_message=message
        ):
            if event.is_final_response() and event.content and event.content.parts:
                print("".join(p.text or "" for p in event.content.parts))


def main() -> None:
    # LiteLLM would fetch its price list from GitHub: the tests reach nothing but 127.0.0.1.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    providers = otel_setup.setup("adk-agent")
    asyncio.run(run())
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
