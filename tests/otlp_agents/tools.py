"""The two tools every tiny agent offers, and their OpenAI definitions."""

from __future__ import annotations

import json
from typing import Any


def get_weather(city: str) -> str:
    return json.dumps({"city": city, "forecast": "sunny", "celsius": 21})


def get_time(city: str) -> str:
    return json.dumps({"city": city, "time": "14:05"})


FUNCTIONS = {"get_weather": get_weather, "get_time": get_time}

SYSTEM_PROMPT = "You are a helpful weather assistant."
USER_PROMPT = "What is the weather and the time in Paris?"

OPENAI_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    for name in FUNCTIONS
]


def run_chat_loop(client: Any, model: str = "gpt-4o-mini", on_tool: Any = None) -> str:
    """The plain agent loop: ask, run the requested tools, send the results, return the text."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_PROMPT},
    ]
    for _ in range(4):
        response = client.chat.completions.create(
            model=model, messages=messages, tools=OPENAI_TOOLS
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            run = on_tool or (lambda call, fn, args: fn(**args))
            result = run(call, FUNCTIONS[call.function.name], arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError("the agent did not finish")
