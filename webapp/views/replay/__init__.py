"""The replay's web surfaces: the export API and the dashboard's preview and comparison.

* ``api``: ``GET /api/v1/conversations/<cid>/replay`` (Bearer key, in the OpenAPI document);
* ``pages``: the ``replay`` dashboard blueprint (``replay.preview`` and friends);
* ``service``: finding, loading and replaying a stored conversation, shared by both;
* ``chat``, ``diagnostics_list``, ``form``: pure view models of the page.

The replay itself is ``webapp.replay`` (pure); options and the export document are
``webapp.replay_export``; comparisons are ``webapp.replay_diff``.
"""

from __future__ import annotations

from flask_openapi3 import OpenAPI


def register(app: OpenAPI) -> None:
    from . import pages

    app.register_blueprint(pages.bp)
