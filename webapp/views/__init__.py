"""The dashboard: server-rendered pages with htmx, each with a JSON twin.

One blueprint per area, made by ``security.dashboard_blueprint`` (login guard and security
headers): ``conversations`` (list, timeline, call detail, live view, the conversation's
charts, ``/c/<id>``, delete), ``calls`` (the calls explorer), ``replay`` (preview and
comparison), ``tools`` (table, one tool, its charts), ``costs`` (the Costs page and price
overrides), ``settings`` (keys, redaction rules, channel windows, projects), ``login``
(password login, logout, project switcher) and ``assets`` (plotly.js from the installed
package). Reads come from ``webapp.queries``; view models live next to the views that use
them; ``common`` holds what every view shares (page, fragment or JSON twin).
"""

from __future__ import annotations

from flask import Flask, url_for
from markupsafe import Markup

from ..version import __version__
from . import formatting


def register(app: Flask) -> None:
    from . import (
        assets,
        calls,
        conversations,
        costs,
        login,
        mcp_servers,  # noqa: F401  (its page is a route of the tools area)
        replay,
        runs,
        saved_views,
        settings,
        studies,
        tools,
    )
    from .conversations.address import AnyIdConverter

    # Before the blueprints: their rules are built with the app's converters.
    app.url_map.converters["anyid"] = AnyIdConverter
    for area in (conversations, calls, replay, tools, costs, saved_views, settings, login, assets):
        app.register_blueprint(area.bp)
    app.register_blueprint(runs.bp)
    app.register_blueprint(studies.bp)
    # The scripted demo model (DEV only) is called by an SDK: no CSRF token.
    app.register_blueprint(runs.dev_bp)
    app.extensions["csrf"].exempt(runs.dev_bp)

    formatting.init_app(app)
    _template_helpers(app)


def _template_helpers(app: Flask) -> None:
    from ..analytics.filters import RANGE_LABELS
    from .assets import PLOTLY_VERSION
    from .context import current_project, switcher_projects
    from .conversations.address import conversation_address
    from .highlight import render_value

    def static_url(filename: str) -> str:
        # The version in the query string makes browsers fetch new files after an upgrade.
        return url_for("static", filename=filename, v=__version__)

    def plotly_url() -> str:
        return url_for("assets.plotly_get", version=PLOTLY_VERSION)

    def render_json(value: object) -> Markup:
        """Highlighted JSON in a <pre> (every token escaped by ``highlight``)."""
        rendered = render_value(value)
        return Markup('<pre class="code json">{}</pre>').format(rendered.html)

    app.jinja_env.globals.update(
        static_url=static_url,
        plotly_url=plotly_url,
        render_json=render_json,
        conversation_address=conversation_address,
        current_project=current_project,
        switcher_projects=switcher_projects,
        toolscope_version=__version__,
        range_labels=RANGE_LABELS,
    )
