"""The weather tools as an MCP server over stdio, for the MCP agents (agent_mcp.py).

mcp 2.x (`MCPServer`) traces itself: a SERVER span `tools/call <name>` per call, exported with
the standard OTLP environment variables under `AGENT_SERVICE_NAME` (the server's own service
name). mcp 1.x (`FastMCP`) is instrumented by OpenLLMetry's opentelemetry-instrumentation-mcp,
which on this side only carries the trace context in (no tool span for the SDK's own server).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import otel_setup
from tools import get_time, get_weather


def main() -> None:
    providers = otel_setup.setup("weather-mcp")
    try:
        from mcp.server.mcpserver import MCPServer

        server = MCPServer("weather")
    except ImportError:  # mcp 1.x
        from opentelemetry.instrumentation.mcp import McpInstrumentor

        McpInstrumentor().instrument()
        from mcp.server.fastmcp import FastMCP

        server = FastMCP("weather")

    for function in (get_weather, get_time):
        description = f"{function.__name__.replace('_', ' ').capitalize()} for a city."
        server.tool(name=function.__name__, description=description)(function)

    try:
        server.run()
    finally:
        otel_setup.shutdown(providers)


if __name__ == "__main__":
    main()
