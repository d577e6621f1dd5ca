"""CrewAI instrumented by OpenInference (`openinference-instrumentation-crewai` for crews,
agents and tools, `openinference-instrumentation-openai` for the model calls, as its README
pairs them), at their defaults (content on): the two-turn scenario
of issue 21 as two kickoffs of one crew, in one OpenInference session (`using_session` with
AGENT_CONVERSATION_ID): CrewAI has no chat session of its own. CrewAI's own telemetry is off
(CREWAI_DISABLE_TELEMETRY), so nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("OTEL_SDK_DISABLED", "false")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
import tools
from fake_openai import FOLLOW_UP_PROMPT


def main() -> None:
    providers = otel_setup.setup("crewai-agent")
    from openinference.instrumentation import using_session
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    CrewAIInstrumentor().instrument(tracer_provider=providers[0])
    OpenAIInstrumentor().instrument(tracer_provider=providers[0])
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("get_weather")
    def get_weather(city: str) -> str:
        """Get weather for a city."""
        return tools.get_weather(city)

    @tool("get_time")
    def get_time(city: str) -> str:
        """Get time for a city."""
        return tools.get_time(city)

    llm = LLM(model="openai/gpt-4o-mini", base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    agent = Agent(
        role="Weather assistant",
        goal="Answer questions about the weather and the time",
        backstory=tools.SYSTEM_PROMPT,
        tools=[get_weather, get_time],
        llm=llm,
        verbose=False,
    )
    conversation = os.environ.get("AGENT_CONVERSATION_ID") or "conv-crewai"
    with using_session(conversation):
        for prompt in (tools.USER_PROMPT, FOLLOW_UP_PROMPT):
            task = Task(description=prompt, expected_output="A short answer.", agent=agent)
            crew = Crew(agents=[agent], tasks=[task], verbose=False)
            print(crew.kickoff().raw)
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
