"""The two-turn weather agent on the Anthropic SDK 2.x (issue 21), against the fake Messages
server (`ANTHROPIC_BASE_URL`).

The SDK traces itself whenever a tracer provider is registered (`anthropic.messages.create`
spans; content with `ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE=content`);
`--instrumentation openllmetry` or `openinference` installs that instrumentation beside it, as a
user who had one already would. `--stream` uses `messages.stream` instead of `messages.create`.
`AGENT_CONVERSATION_ID`, when set, goes on the client's `open_telemetry` option.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from fake_openai import FOLLOW_UP_PROMPT
from tools import FUNCTIONS, OPENAI_TOOLS, SYSTEM_PROMPT, USER_PROMPT

MODEL = "claude-sonnet-4-5"
TOOLS = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in OPENAI_TOOLS
]


def _ask(client: Any, messages: list[dict[str, Any]], stream: bool) -> Any:
    arguments = {
        "model": MODEL,
        "max_tokens": 1024,
        "system": SYSTEM_PROMPT,
        "messages": messages,
        "tools": TOOLS,
    }
    if stream:
        with client.messages.stream(**arguments) as events:
            for _ in events:
                pass
            return events.get_final_message()
    return client.messages.create(**arguments)


def run_turn(client: Any, messages: list[dict[str, Any]], prompt: str, stream: bool) -> str:
    """One user turn: ask, run the tools the model asks for, send the results, until text."""
    messages.append({"role": "user", "content": prompt})
    for _ in range(4):
        message = _ask(client, messages, stream)
        content = [block.model_dump(exclude_none=True) for block in message.content]
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return "".join(b.text for b in message.content if b.type == "text")
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": FUNCTIONS[call.name](**call.input),
                    }
                    for call in calls
                ],
            }
        )
    raise RuntimeError("the agent did not finish")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instrumentation", choices=("none", "openllmetry", "openinference"))
    parser.add_argument("--stream", action="store_true")
    options = parser.parse_args()
    providers = otel_setup.setup("anthropic-agent")
    if options.instrumentation == "openllmetry":
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

        AnthropicInstrumentor().instrument()
    elif options.instrumentation == "openinference":
        from openinference.instrumentation.anthropic import AnthropicInstrumentor

        AnthropicInstrumentor().instrument(tracer_provider=providers[0])
    from anthropic import Anthropic

    client = Anthropic(base_url=os.environ["ANTHROPIC_BASE_URL"], api_key="sk-ant-test")
    conversation = os.environ.get("AGENT_CONVERSATION_ID")
    if conversation:
        client = client.with_options(
            open_telemetry={**client.open_telemetry, "conversation_id": conversation}
        )
    messages: list[dict[str, Any]] = []
    for prompt in (USER_PROMPT, FOLLOW_UP_PROMPT):
        print(run_turn(client, messages, prompt, options.stream))
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
