"""What a web worker keeps for its replays (the answer cache, ``services.replay_cache``, and the
row memo, ``services.row_memo``): values with their sizes, the least recently used out first
once the sizes add up to more than a budget, the ``REPLAY_CACHE_MB`` setting for each.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from flask import Flask

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def budget_bytes(app: Flask) -> int:
    """``REPLAY_CACHE_MB`` in bytes (0: off)."""
    megabytes = app.config.get("REPLAY_CACHE_MB", 0) or 0
    return int(float(megabytes) * 1024 * 1024)


class SizedLRU(Generic[K, V]):
    """Values by key, each with its size; one lock, as a worker's request threads share it."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def lookup(self, key: K, holds: Callable[[V], bool] | None = None) -> V | None:
        """The value of ``key``, now the most recently used; None if there is none, or if it
        no longer ``holds`` (it is then dropped)."""
        with self._lock:
            return self._lookup(key, holds)

    def _lookup(self, key: K, holds: Callable[[V], bool] | None) -> V | None:
        # With the lock held.
        item = self._items.get(key)
        if item is None:
            return None
        if holds is not None and not holds(item[0]):
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return item[0]

    def store(self, key: K, value: V, size: int) -> None:
        """``value`` for ``key``, replacing what was there; not kept if larger than the whole
        budget."""
        with self._lock:
            if key in self._items:
                self._drop(key)
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._items)))

    def _drop(self, key: K) -> None:
        _, size = self._items.pop(key)
        self._bytes -= size

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def order(self) -> list[K]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._items)

    def values(self) -> list[V]:
        """The values, least recently used first."""
        with self._lock:
            return [value for value, _ in self._items.values()]

    def __len__(self) -> int:
        return len(self._items)
