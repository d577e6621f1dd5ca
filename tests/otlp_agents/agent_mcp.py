"""An OpenAI SDK agent loop whose tools live on an MCP server (mcp_server.py, over stdio).

`--family v2` (mcp 2.x, its native spans: client `MCP send tools/call <name>`, server
`tools/call <name>`), with the model calls traced by OTel contrib openai-v2; `--family v1`
(mcp 1.x with OpenLLMetry's opentelemetry-instrumentation-mcp: `<name>.tool`), with the model
calls traced by OpenLLMetry's openai instrumentation. Without `--wrapped` every model call and
every MCP call is a trace of its own; with it, the run sits under an agent span (v2: util-genai's
`invoke_agent`, each MCP call inside an `execute_tool` span with the model's call id; v1: a plain
span).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

os.environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_AND_EVENT")
os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import SYSTEM_PROMPT, USER_PROMPT

HERE = os.path.dirname(os.path.abspath(__file__))

FAMILY = sys.argv[sys.argv.index("--family") + 1] if "--family" in sys.argv else "v2"
WRAPPED = "--wrapped" in sys.argv


def _server_params():
    from mcp import StdioServerParameters

    env = dict(os.environ)
    env["AGENT_SERVICE_NAME"] = os.environ.get("MCP_SERVER_SERVICE_NAME", "weather-mcp")
    # The client stops the server when it is done: export each span soon after it ends rather
    # than in a final flush the stop may cut short.
    env["OTEL_BSP_SCHEDULE_DELAY"] = "100"
    return StdioServerParameters(
        command=sys.executable, args=[os.path.join(HERE, "mcp_server.py")], env=env
    )


class Tools:
    """The MCP session, as the agent loop needs it: the tools in OpenAI's shape, and a call."""

    def __init__(self, session) -> None:
        self.session = session

    async def definitions(self) -> list[dict]:
        listed = await self.session.list_tools()
        out = []
        for tool in listed.tools:
            schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema", None)
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": schema,
                    },
                }
            )
        return out

    async def call(self, name: str, arguments: dict) -> str:
        result = await self.session.call_tool(name, arguments)
        return result.content[0].text


async def _loop(client, tools: Tools, run_tool) -> str:
    definitions = await tools.definitions()
    messages: list[dict] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_PROMPT},
    ]
    for _ in range(4):
        response = await client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, tools=definitions
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
            result = await run_tool(call, arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError("the agent did not finish")


async def _run_v2(client) -> None:
    from mcp import Client

    async with Client(_server_params()) as session:
        tools = Tools(session)
        if not WRAPPED:
            await _loop(client, tools, lambda call, args: tools.call(call.function.name, args))
            return
        from opentelemetry.util.genai.handler import get_telemetry_handler

        handler = get_telemetry_handler()

        async def run_tool(call, arguments):
            with handler.tool(call.function.name, tool_call_id=call.id, tool_type="function") as t:
                t.arguments = arguments
                t.tool_result = await tools.call(call.function.name, arguments)
            return t.tool_result

        with handler.invoke_local_agent(agent_name="weather_agent") as agent:
            agent.conversation_id = os.environ.get("AGENT_CONVERSATION_ID") or "conv-mcp"
            await _loop(client, tools, run_tool)


async def _run_v1(client) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async with (
        stdio_client(_server_params()) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = Tools(session)

        async def run_tool(call, arguments):
            return await tools.call(call.function.name, arguments)

        if not WRAPPED:
            await _loop(client, tools, run_tool)
            return
        from opentelemetry import trace

        with trace.get_tracer("agent").start_as_current_span("weather_agent"):
            await _loop(client, tools, run_tool)


def main() -> None:
    providers = otel_setup.setup("mcp-agent")
    from openai import AsyncOpenAI

    if FAMILY == "v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    else:
        from opentelemetry.instrumentation.mcp import McpInstrumentor
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
        McpInstrumentor().instrument()
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
    asyncio.run(_run_v2(client) if FAMILY == "v2" else _run_v1(client))
    otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
