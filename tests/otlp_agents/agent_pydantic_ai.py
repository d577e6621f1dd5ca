"""pydantic-ai's own instrumentation (format v5 by default, `--v6` for v6)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import SYSTEM_PROMPT, USER_PROMPT, get_time, get_weather


def main() -> None:
    providers = otel_setup.setup("pydantic-ai-agent")
    from pydantic_ai import Agent, InstrumentationSettings
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    content = os.environ.get("AGENT_CAPTURE_CONTENT", "1") == "1"
    settings = InstrumentationSettings(
        tracer_provider=providers[0],
        include_content=content,
        version=6 if "--v6" in sys.argv else 5,
    )
    model = OpenAIChatModel(
        "gpt-4o-mini",
        provider=OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test"),
    )
    agent = Agent(model, name="weather_agent", system_prompt=SYSTEM_PROMPT)
    agent.instrument = settings
    agent.tool_plain(get_weather)
    agent.tool_plain(get_time)
    conversation = os.environ.get("AGENT_CONVERSATION_ID", "conv-pydantic-ai")
    agent.run_sync(USER_PROMPT, conversation_id=conversation)
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
