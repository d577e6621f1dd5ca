"""The dashboard: server-rendered pages with htmx, each with a JSON twin.

Blueprints, one per area: ``conversations`` (list, timeline, call detail, live view),
``tools``, ``settings`` (keys, redaction rules, channel windows), ``login`` (password login,
logout, project switcher) and ``assets`` (plotly.js from the installed package). The Costs page
is the analytics module's. Read queries live in ``webapp.queries``; pure view-model code
(timeline grouping, badges, highlighting) in modules of this package.
"""

from __future__ import annotations

from flask import Flask, current_app, url_for
from markupsafe import Markup

from .. import __version__
from . import formatting


def register(app: Flask) -> None:
    from . import assets, conversations, login, settings, tools

    for module in (conversations, tools, settings, login, assets):
        app.register_blueprint(module.bp)

    formatting.init_app(app)
    _template_helpers(app)


def _template_helpers(app: Flask) -> None:
    from .assets import PLOTLY_VERSION
    from .context import current_project, switcher_projects
    from .highlight import render_value
    from .links import replay_url

    def static_url(filename: str) -> str:
        # The version in the query string makes browsers fetch new files after an upgrade.
        return url_for("static", filename=filename, v=__version__)

    def plotly_url() -> str:
        return url_for("assets.plotly_js", version=PLOTLY_VERSION)

    def render_json(value: object) -> Markup:
        """Highlighted JSON in a <pre> (every token escaped by ``highlight``)."""
        rendered = render_value(value)
        return Markup('<pre class="code json">{}</pre>').format(rendered.html)

    def has_endpoint(name: str) -> bool:
        """Whether an optional area (replay, analytics) is installed."""
        return name in current_app.view_functions

    app.jinja_env.globals.update(
        has_endpoint=has_endpoint,
        static_url=static_url,
        plotly_url=plotly_url,
        render_json=render_json,
        current_project=current_project,
        switcher_projects=switcher_projects,
        replay_url=replay_url,
        toolscope_version=__version__,
    )
