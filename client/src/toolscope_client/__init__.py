"""Record an LLM agent's tool calls in Toolscope without ever breaking the agent.

Only `requests` is needed. The client's major version is the API version it speaks (1.x talks
to `/api/v1`).

    from toolscope_client import ToolscopeClient

    toolscope = ToolscopeClient("http://127.0.0.1:8000", "ts_...")
    toolscope.record_turn("chat-1", user={...}, assistant={...}, rounds=[...])

Requests are split within the server's limits (learned once from `GET /api/v1/meta`, else the
documented defaults), retried idempotently on connection errors, timeouts, 5xx and 429, and
buffered while Toolscope is down (one warning per outage). With the default
``raise_errors=False`` nothing raises into the agent's loop.
"""

from ._version import API_VERSION, __version__
from .adapters import calls_from_openai, tool_definition, usage_from_openai
from .client import ToolscopeClient
from .errors import ToolscopeError, ToolscopeRequestError, ToolscopeUnavailable
from .limits import DEFAULT_LIMITS, Limits

__all__ = [
    "API_VERSION",
    "DEFAULT_LIMITS",
    "Limits",
    "ToolscopeClient",
    "ToolscopeError",
    "ToolscopeRequestError",
    "ToolscopeUnavailable",
    "__version__",
    "calls_from_openai",
    "tool_definition",
    "usage_from_openai",
]
