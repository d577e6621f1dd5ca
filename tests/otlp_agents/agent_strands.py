"""The two-turn weather agent on Strands Agents (issue 21): its OpenAI model provider against
the fake OpenAI server (streamed Chat Completions), its own OpenTelemetry spans through the
global tracer provider. Strands records content by default, as span events; with
`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` as one
`gen_ai.client.inference.operation.details` event. One Agent, two calls: the second carries the
first's history. `AGENT_CONVERSATION_ID`, when set, goes in `trace_attributes` as `session.id`.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
import tools as weather
from fake_openai import FOLLOW_UP_PROMPT


def main() -> None:
    providers = otel_setup.setup("strands-agent")
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def get_weather(city: str) -> str:
        """Get weather for a city."""
        return weather.get_weather(city)

    @tool
    def get_time(city: str) -> str:
        """Get time for a city."""
        return weather.get_time(city)

    model = OpenAIModel(
        client_args={"base_url": os.environ["OPENAI_BASE_URL"], "api_key": "sk-test"},
        model_id="gpt-4o-mini",
    )
    conversation = os.environ.get("AGENT_CONVERSATION_ID")
    agent = Agent(
        name="weather_agent",
        model=model,
        system_prompt=weather.SYSTEM_PROMPT,
        tools=[get_weather, get_time],
        callback_handler=None,
        trace_attributes={"session.id": conversation} if conversation else None,
    )
    for prompt in (weather.USER_PROMPT, FOLLOW_UP_PROMPT):
        print(agent(prompt))
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
