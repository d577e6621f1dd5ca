"""Delivery that never breaks the agent: writes wait in a bounded buffer while Toolscope is down.

* A write is sent with the transport's retries. If it still fails transiently, an outage starts:
  one warning is logged (not one per call) and the request is buffered. While the outage lasts,
  new writes go straight to the buffer behind the older ones, and at most one request per
  `probe_interval` checks whether the server is back, so a dead server costs the agent no time.
* The buffer is sent oldest first on the next write or on `flush()`; a round's responses never
  overtake the calls they answer. Beyond its size (requests or bytes) the oldest are dropped.
* A 4xx is never retried nor buffered: it is logged with the field the server names, counted
  in `rejected`, and the write answers None.
* With `raise_errors` all this is off: failures raise and nothing is buffered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .encoding import encode
from .errors import ToolscopeRequestError, ToolscopeUnavailable, Transient
from .transport import Request, Transport

log = logging.getLogger("toolscope.client")


@dataclass
class _Outage:
    since: float
    last_attempt: float
    reason: str
    drop_warned: bool = False


@dataclass
class _Buffer:
    """The requests waiting for Toolscope to come back, oldest first, bounded in count and bytes."""

    max_items: int
    max_bytes: int
    items: deque[Request] = field(default_factory=deque)
    bytes: int = 0
    dropped: int = 0

    def append(self, item: Request) -> int:
        """Queue a request; returns how many old requests had to be dropped to make room."""
        self.items.append(item)
        self.bytes += item.size
        dropped = 0
        while self.items and (len(self.items) > self.max_items or self.bytes > self.max_bytes):
            self.bytes -= self.items.popleft().size
            dropped += 1
        self.dropped += dropped
        return dropped

    def remove_head(self, item: Request) -> None:
        # The head may have been dropped by an overflow while it was in flight.
        if self.items and self.items[0] is item:
            self.bytes -= self.items.popleft().size


class Delivery:
    """Sends writes and reads through a `Transport` under the failure policy above."""

    def __init__(
        self,
        transport: Transport,
        *,
        raise_errors: bool,
        buffer_size: int,
        buffer_bytes: int,
        probe_interval: float,
    ):
        self.transport = transport
        self.raise_errors = raise_errors
        self.probe_interval = probe_interval
        self._buffer = _Buffer(buffer_size, buffer_bytes)
        self._outage: _Outage | None = None
        self._rejected = 0
        # _lock guards the buffer, the outage and the counters (short critical sections only);
        # _flush_lock lets one thread at a time send the buffer, so its order is kept.
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()

    @property
    def dropped(self) -> int:
        return self._buffer.dropped

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._buffer.items)

    @property
    def rejected(self) -> int:
        return self._rejected

    @property
    def is_down(self) -> bool:
        """True while an outage lasts (requests are being buffered)."""
        return self._outage is not None

    def write(self, method: str, path: str, payload: Any) -> Any:
        """The server's answer, or None when the request was buffered or refused."""
        request = Request(method, path, encode(payload))
        if self.raise_errors:
            return self._send_or_raise(request)
        with self._lock:
            backlog = bool(self._buffer.items) or self._outage is not None
            if backlog:
                self._enqueue_locked(request)
        if backlog:
            # Behind older requests: they go first. If another thread is already flushing, it
            # will take ours too.
            if self._flush_lock.acquire(blocking=False):
                try:
                    self._drain(force=False)
                finally:
                    self._flush_lock.release()
            return request.answer
        try:
            return self.transport.send(request)
        except Transient as exc:
            with self._lock:
                self._start_outage_locked(exc.reason)
                self._enqueue_locked(request)
            return None
        except ToolscopeRequestError as exc:
            self._log_rejected(exc)
            return None

    def read(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """The server's answer, or None (logged) when unreachable or refused. Never buffered."""
        request = Request("GET", path, params=params)
        if self.raise_errors:
            return self._send_or_raise(request)
        try:
            return self.transport.send(request)
        except Transient as exc:
            log.warning("Toolscope read %s failed: %s", path, exc.reason)
        except ToolscopeRequestError as exc:
            self._log_rejected(exc)
        return None

    def flush(self) -> bool:
        """Send the buffered requests now, in order. True when the buffer is empty afterwards."""
        with self._flush_lock:
            self._drain(force=True)
        return self.pending == 0

    def _send_or_raise(self, request: Request) -> Any:
        try:
            return self.transport.send(request)
        except Transient as exc:
            where = self.transport.describe(request)
            raise ToolscopeUnavailable(f"{where}: {exc.reason}") from None

    def _drain(self, *, force: bool) -> None:
        """Send buffered requests oldest first until empty or Toolscope fails again.

        The caller holds `_flush_lock`. While an outage lasts, one request probes the server at
        most once per `probe_interval` (unless forced) and without retries.
        """
        while True:
            with self._lock:
                if not self._buffer.items:
                    self._end_outage_locked()
                    return
                outage = self._outage
                now = time.monotonic()
                if outage and not force and now - outage.last_attempt < self.probe_interval:
                    return
                if outage:
                    outage.last_attempt = now
                item = self._buffer.items[0]
            try:
                item.answer = self.transport.send(item, 0 if outage else None)
            except Transient as exc:
                with self._lock:
                    self._start_outage_locked(exc.reason)
                return
            except ToolscopeRequestError as exc:
                # Refused for good (a conflict, a revoked key...): retrying cannot help.
                self._log_rejected(exc)
            with self._lock:
                self._buffer.remove_head(item)

    # -- outage bookkeeping (callers hold _lock) -----------------------------------------------

    def _enqueue_locked(self, request: Request) -> None:
        dropped = self._buffer.append(request)
        if dropped and self._outage and not self._outage.drop_warned:
            self._outage.drop_warned = True
            log.warning(
                "Toolscope buffer full (%d requests, %d bytes): dropping the oldest requests; "
                "see ToolscopeClient.dropped",
                self._buffer.max_items,
                self._buffer.max_bytes,
            )

    def _start_outage_locked(self, reason: str) -> None:
        now = time.monotonic()
        if self._outage is None:
            self._outage = _Outage(since=now, last_attempt=now, reason=reason)
            log.warning(
                "Toolscope unreachable at %s (%s); buffering up to %d requests until it is back",
                self.transport.api_base,
                reason,
                self._buffer.max_items,
            )
        else:
            self._outage.last_attempt = now

    def _end_outage_locked(self) -> None:
        if self._outage is not None:
            log.warning(
                "Toolscope reachable again after %.1f s; buffer delivered (%d dropped so far)",
                time.monotonic() - self._outage.since,
                self._buffer.dropped,
            )
            self._outage = None

    def _log_rejected(self, exc: ToolscopeRequestError) -> None:
        with self._lock:
            self._rejected += 1
        details = f" details={exc.details}" if exc.details else ""
        log.warning("Toolscope refused %s%s", exc, details)
