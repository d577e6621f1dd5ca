"""LangChain 1.x `create_agent` or LangGraph `create_react_agent` with ChatOpenAI, instrumented
by OpenInference (`openinference-instrumentation-langchain`) or OpenLLMetry
(`opentelemetry-instrumentation-langchain`), at their defaults (content on): the two-turn
scenario of issue 21 in one thread (a checkpointer, `thread_id` = AGENT_CONVERSATION_ID).

    python agent_langchain.py --builder create_agent|create_react_agent \
        --instrumentation openinference|openllmetry
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
import tools
from fake_openai import FOLLOW_UP_PROMPT


def _instrument(name: str, tracer_provider) -> None:
    if name == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=tracer_provider)
    else:
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor

        LangchainInstrumentor().instrument(tracer_provider=tracer_provider)


def _agent(builder: str):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver

    @tool
    def get_weather(city: str) -> str:
        """Get weather for a city."""
        return tools.get_weather(city)

    @tool
    def get_time(city: str) -> str:
        """Get time for a city."""
        return tools.get_time(city)

    model = ChatOpenAI(
        model="gpt-4o-mini", api_key="sk-test", base_url=os.environ["OPENAI_BASE_URL"]
    )
    if builder == "create_agent":
        from langchain.agents import create_agent

        return create_agent(
            model,
            tools=[get_weather, get_time],
            system_prompt=tools.SYSTEM_PROMPT,
            checkpointer=InMemorySaver(),
        )
    from langgraph.prebuilt import create_react_agent

    return create_react_agent(
        model,
        tools=[get_weather, get_time],
        prompt=tools.SYSTEM_PROMPT,
        checkpointer=InMemorySaver(),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--builder", choices=("create_agent", "create_react_agent"))
    parser.add_argument("--instrumentation", choices=("openinference", "openllmetry"))
    args = parser.parse_args()
    providers = otel_setup.setup(f"langchain-{args.builder}-{args.instrumentation}")
    _instrument(args.instrumentation, providers[0])
    agent = _agent(args.builder)
    thread = os.environ.get("AGENT_CONVERSATION_ID") or "thread-langchain"
    config = {"configurable": {"thread_id": thread}}
    for prompt in (tools.USER_PROMPT, FOLLOW_UP_PROMPT):
        state = agent.invoke({"messages": [{"role": "user", "content": prompt}]}, config)
        print(state["messages"][-1].content)
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
