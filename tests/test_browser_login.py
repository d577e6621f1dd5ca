"""The login form in Chromium: whatever ``next`` the link carries, the browser ends up on this
site. Chromium followed ``/login?next=/%09/evil.example/phish`` to ``//evil.example/phish``:
it drops the tab, and the rest is another host. Marked ``browser`` (see browser_support)."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest
from browser_support import (  # noqa: F401  (fixtures)
    SQLITE_ONLY,
    TIMEOUT_MS,
    PageWatch,
    chromium_fixture,
    new_page,
    skip_without_browser,
)

pytestmark = pytest.mark.browser

skip_without_browser()

# As a link would carry them: already URL-encoded where a browser would send them encoded.
NEXT_VALUES = [
    "/%09/evil.example/phish",
    "/%0D%0A/evil.example",
    "//evil.example/x",
    "/%5Cevil.example",
    "/%5C/evil.example",
    "https://evil.example/",
    "%20//evil.example",
    "%EF%BC%8F%EF%BC%8Fevil.example",
    "/%EF%BC%8F%EF%BC%8Fevil.example",
    "/.//evil.example",
    "/%2F%2Fevil.example",
]


@SQLITE_ONLY  # one database is enough for a browser's view of a redirect
@pytest.mark.parametrize("next_value", NEXT_VALUES)
def test_the_login_form_lands_on_this_site(chromium, live_server, next_value):
    with new_page(chromium, base_url=live_server) as page:
        page.context.set_default_timeout(TIMEOUT_MS)
        problems = PageWatch(page, expected=("404",))  # odd paths of this site
        page.goto(f"/login?next={next_value}")
        page.fill("#password", "test-password")
        with page.expect_navigation():
            page.click("button[type=submit]")
        page.wait_for_load_state()
        landed = urlsplit(page.url)
        assert (landed.scheme, landed.netloc) == tuple(urlsplit(live_server)[:2]), page.url
        assert problems.outside == []
        assert problems.problems == []


def test_next_values_are_sent_as_written():
    # The list is of encoded values: a raw tab or space would be dropped by the page URL.
    assert all(value == quote(value, safe="/:%.") for value in NEXT_VALUES)
