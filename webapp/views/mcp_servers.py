"""The MCP servers page (``/tools/mcp``, and its JSON twin): the servers the project's calls went
through, with their tools, calls, error rate, latency and the tokens their tool definitions add
to every round that offers them (docs/otlp-mapping.md, 'MCP calls'). It lives in the tools area,
beside the tools table."""

from __future__ import annotations

from ..queries import mcp_servers as queries
from .common import respond, twin_get
from .context import current_project
from .tools import bp


@twin_get(bp, "/tools/mcp")
def mcp_servers_get(fmt: str):
    servers = queries.mcp_servers(current_project().id)
    data = {"object": "list", "data": servers}
    return respond(data, page="tools/mcp_servers.html", fmt=fmt, json_keys=("object", "data"))
