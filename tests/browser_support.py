"""What every browser test needs: where Chromium is, how it is launched, when the tests skip, a
watch over what goes wrong in a page, and screenshots.

The rule for a missing browser: tests marked ``browser`` skip when Debian's Chromium is not at
/usr/bin/chromium, except in CI (``CI`` set), where a missing browser is a failure.

Use the fixtures by importing them into the test module, as with ``dashboard_support``:
``from browser_support import chromium_fixture, tab_fixture  # noqa: F401``; tests then ask
for ``chromium``, ``tab``, ... A module starts with ``expect = playwright_expect()`` (or
``skip_without_browser()`` when it does not use ``expect``) and marks its tests ``browser``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = Path("/usr/bin/chromium")
# Headless on a shared, offline machine: no GPU, no sandbox (containers), and none of the
# background fetches (updates, sync) that would reach for the network.
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Not committed: pictures for a person to look at after a run.
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
# Playwright waits are event driven; this only bounds how long a missing element is awaited.
TIMEOUT_MS = 10_000
# The window a dashboard page is seen through.
VIEWPORT = {"width": 1400, "height": 900}
# One database is enough to drive a browser; the HTML tests cover both for the pages.
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def skip_without_browser() -> None:
    """Skip the calling module (or test) when Chromium is missing; in CI, fail instead."""
    if CHROMIUM.exists():
        return
    if os.environ.get("CI"):
        raise RuntimeError(f"CI needs Chromium at {CHROMIUM} for the browser tests")
    pytest.skip(f"no browser at {CHROMIUM}", allow_module_level=True)


def playwright_expect() -> Any:
    """Playwright's ``expect``, waiting at most TIMEOUT_MS; skips the calling module when
    Chromium (see :func:`skip_without_browser`) or Playwright is missing."""
    skip_without_browser()
    sync_api = pytest.importorskip("playwright.sync_api")
    sync_api.expect.set_options(timeout=TIMEOUT_MS)
    return sync_api.expect


@pytest.fixture(name="app_config")
def dev_app_config_fixture() -> dict[str, Any]:
    """DEV: the dashboard opens without a login for loopback requests, as on a developer's box
    (the login form has tests of its own)."""
    return {"DEV": True}


@pytest.fixture(name="scheme", params=["light", "dark"])
def scheme_fixture(request: pytest.FixtureRequest) -> str:
    """The colour scheme the pages are seen in: a test that asks for it runs in both."""
    return request.param


@pytest.fixture(name="chromium", scope="module")
def chromium_fixture() -> Iterator[Any]:
    """Chromium launched once per test module; each test opens its own context."""
    skip_without_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def new_page(chromium: Any, **context_options: Any) -> Iterator[Any]:
    """A page in a fresh browser context (its own cookies and storage), closed afterwards."""
    context = chromium.new_context(**context_options)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture(name="tab")
def tab_fixture(chromium: Any, live_server: str, scheme: str) -> Iterator[tuple[Any, PageWatch]]:
    """A page on the live server in a fresh browser context (VIEWPORT, in ``scheme``) and its
    watch; the test fails if anything went wrong in the page."""
    options = {"viewport": VIEWPORT, "color_scheme": scheme}
    with new_page(chromium, base_url=live_server, **options) as page:
        page.context.set_default_timeout(TIMEOUT_MS)
        problems = PageWatch(page)
        yield page, problems
    problems.assert_clean()


def screenshot(page: Any, name: str, full_page: bool = True) -> Path:
    """Save ``test-artifacts/<name>.png`` and return its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


class PageWatch:
    """Everything that goes wrong in a page while a test drives it.

    ``problems``: console errors and warnings, page errors, failed requests and HTTP errors;
    ``outside``: requests to a host other than this machine; ``dialogs``: alerts and confirms
    (dismissed). ``expected`` lists substrings of problems the test provokes on purpose.
    """

    def __init__(self, page: Any, expected: tuple[str, ...] = ()) -> None:
        self.page = page
        self.expected = expected
        self.problems: list[str] = []
        self.outside: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self._problem(f"page error: {exc}"))
        page.on("requestfailed", self._failed)
        page.on("response", self._response)
        page.on("request", self._request)
        page.on("dialog", self._dialog)

    def assert_clean(self) -> None:
        assert self.problems == [], self.problems
        assert self.outside == [], self.outside
        assert self.dialogs == [], self.dialogs

    def shot(self, name: str, full_page: bool = True) -> Path:
        return screenshot(self.page, name, full_page)

    def _problem(self, text: str) -> None:
        if not any(part in text for part in self.expected):
            self.problems.append(text)

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self._problem(f"console {message.type}: {message.text}")

    def _failed(self, request: Any) -> None:
        # A poll still in flight when the test navigates away is cancelled by the browser.
        if request.failure != "net::ERR_ABORTED":
            self._problem(f"request failed: {request.url} {request.failure}")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self._problem(f"HTTP {response.status}: {response.url}")

    def _request(self, request: Any) -> None:
        url = request.url
        if url.startswith(("data:", "blob:", "about:")):
            return
        if (urlsplit(url).hostname or "") not in LOOPBACK:
            self.outside.append(url)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()
