"""The server's request limits: asked once (`GET /api/v1/meta`), or the documented defaults.

The defaults are Toolscope's own (its settings `TOOLSCOPE_MAX_*`). A server that predates
`/meta` (404), refuses the key, or answers nonsense gets them; a server that is unreachable
gets them for now and is asked again once it is back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ._version import API_VERSION
from .errors import ToolscopeRequestError, Transient
from .transport import Request, Transport

log = logging.getLogger("toolscope.client")

META_PATH = "/meta"


@dataclass(frozen=True)
class Limits:
    """What one request may carry. The client splits its requests to stay within these."""

    max_tools_per_request: int = 50
    max_ids_per_request: int = 200
    max_messages_per_request: int = 500
    max_body_bytes: int = 8 * 1024 * 1024
    max_result_bytes: int = 2 * 1024 * 1024

    @classmethod
    def from_meta(cls, answer: Any) -> Limits:
        """The limits in a `/meta` answer; a missing or unusable value keeps its default."""
        given = answer.get("limits") if isinstance(answer, dict) else None
        if not isinstance(given, dict):
            return cls()
        values = {
            f.name: given[f.name]
            for f in fields(cls)
            if isinstance(given.get(f.name), int)
            and not isinstance(given[f.name], bool)
            and given[f.name] > 0
        }
        return cls(**values)


DEFAULT_LIMITS = Limits()


class ServerLimits:
    """The limits of the server behind `transport`, fetched the first time they are needed
    (unless `known` is given).

    One attempt, no retries, and none at all while `is_down()`: learning the limits must not
    cost an agent time when Toolscope is down.
    """

    def __init__(
        self, transport: Transport, is_down: Callable[[], bool], known: Limits | None = None
    ):
        self._transport = transport
        self._is_down = is_down
        self._known = known
        self._lock = threading.Lock()

    def get(self) -> Limits:
        if self._known is not None:
            return self._known
        if self._is_down():
            return DEFAULT_LIMITS
        with self._lock:
            if self._known is None:
                self._known = self._fetch()
            return self._known or DEFAULT_LIMITS

    def _fetch(self) -> Limits | None:
        """The server's limits; None when it could not be asked (ask again later)."""
        try:
            answer = self._transport.send(Request("GET", META_PATH), retries=0)
        except Transient as exc:
            log.debug("Toolscope limits unknown for now (%s); using the defaults", exc.reason)
            return None
        except ToolscopeRequestError as exc:
            # 404: a server older than /meta. Anything else the next write will report.
            log.debug("Toolscope limits not available (%s); using the defaults", exc)
            return DEFAULT_LIMITS
        version = answer.get("api_version") if isinstance(answer, dict) else None
        if version != API_VERSION:
            log.warning(
                "Toolscope at %s serves API version %r; this client speaks version %d",
                self._transport.api_base,
                version,
                API_VERSION,
            )
        return Limits.from_meta(answer)
