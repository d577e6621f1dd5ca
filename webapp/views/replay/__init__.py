"""The ``replay`` blueprint: the preview of one conversation's replay and the comparison of two
policies (``pages``), with the pure view models of those pages (``chat``, ``diagnostics_list``,
``form``).

The replay itself, its options, export document and comparison are ``webapp.replay``; the
history it replays is loaded by ``webapp.queries.histories``.
"""

from __future__ import annotations

from ..security import dashboard_blueprint

bp = dashboard_blueprint("replay", __name__)

from . import pages  # noqa: E402,F401  (routes register on bp)
