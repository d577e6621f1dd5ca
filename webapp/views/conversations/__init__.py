"""The ``conversations`` blueprint: the list, the conversation timeline (with its lazy pages and
live view), the call detail panel and the conversation's charts, one module each, with the view
models they use (``timeline_model``, ``badges``, ``gantt``, ``list_filters``)."""

from __future__ import annotations

from ..security import dashboard_blueprint

bp = dashboard_blueprint("conversations", __name__)

from . import address, calls, charts, delete, listing, timeline, trace  # noqa: E402,F401  (routes register on bp)
