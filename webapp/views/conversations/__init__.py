"""The ``conversations`` blueprint: the list, the conversation timeline (with its lazy pages and
live view) and the call detail panel, one module each."""

from __future__ import annotations

from ..security import dashboard_blueprint

bp = dashboard_blueprint("conversations", __name__)

from . import calls, listing, timeline  # noqa: E402,F401  (routes register on bp)
