"""plotly.js, served from the installed ``plotly`` Python package (never a CDN)."""

from __future__ import annotations

from importlib import resources

import plotly
from flask import send_file

from .security import dashboard_blueprint

bp = dashboard_blueprint("assets", __name__, login=False)

PLOTLY_VERSION = plotly.__version__
ONE_YEAR = 365 * 24 * 3600


@bp.get("/vendor/plotly-<version>.min.js")
def plotly_get(version: str = PLOTLY_VERSION):
    """The versioned URL lets browsers cache it for a year; another version is a 404."""
    if version != PLOTLY_VERSION:
        return "plotly.js version not installed", 404
    path = resources.files("plotly") / "package_data" / "plotly.min.js"
    return send_file(
        str(path), mimetype="text/javascript", max_age=ONE_YEAR, conditional=True, etag=True
    )
