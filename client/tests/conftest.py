from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fake_toolscope import FakeToolscope, free_port

from toolscope_client import ToolscopeClient


@pytest.fixture
def toolscope() -> Iterator[FakeToolscope]:
    with FakeToolscope() as server:
        yield server


@pytest.fixture
def down_url() -> str:
    """The URL of a Toolscope that is down (nothing listens there)."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def make_client() -> Callable[..., ToolscopeClient]:
    """A client without backoff sleeps: the tests count attempts, they do not wait for them."""

    def make(url: str, **options: Any) -> ToolscopeClient:
        options.setdefault("backoff", 0.0)
        return ToolscopeClient(url, "ts_test", **options)

    return make
