"""The test suite's own HTTP server (the `live_server` fixture): static files are served whole
and conditionally, through the file wrapper that reads and closes them at once."""

from __future__ import annotations

from pathlib import Path

import requests

STATIC = Path(__file__).resolve().parent.parent / "static"


def test_static_files_are_served_whole_and_conditionally(live_server):
    url = f"{live_server}/static/img/favicon.svg"
    first = requests.get(url, timeout=10)
    assert first.status_code == 200
    assert first.content == (STATIC / "img" / "favicon.svg").read_bytes()
    assert int(first.headers["Content-Length"]) == len(first.content)
    again = requests.get(url, headers={"If-None-Match": first.headers["ETag"]}, timeout=10)
    assert again.status_code == 304 and again.content == b""
    part = requests.get(url, headers={"Range": "bytes=0-9"}, timeout=10)
    assert part.status_code == 206 and part.content == first.content[:10]
