"""Login guard and security headers for the dashboard blueprints."""

from __future__ import annotations

from flask import Blueprint, Response, redirect, request, url_for

from ..auth import dashboard_login_needed
from ..errors import error_response
from .common import is_htmx, wants_json

# Scripts only from our own origin: htmx, Plotly and toolscope.js, no inline script, no eval.
# Plotly sets SVG style attributes from script, so inline styles stay allowed; they cannot
# run code. Agent content is escaped anyway: this is the second line of defence.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)


def require_login() -> Response | None:
    """``before_request`` of every dashboard blueprint (login excepted): the decision of
    ``webapp.auth.dashboard_login_needed`` (DEV loopback bypass included), answered in the form
    the request understands."""
    if not dashboard_login_needed():
        return None
    if wants_json() or request.path.endswith(".json"):
        return error_response(401, "log in to the dashboard first (see /login)")
    login_url = url_for("login.login_get", next=request.full_path.rstrip("?"))
    if is_htmx():
        # A redirect would be followed inside the XHR and swapped into a fragment.
        return Response(status=204, headers={"HX-Redirect": login_url})
    return redirect(login_url)


def add_security_headers(response: Response) -> Response:
    """``after_request`` of the dashboard blueprints; reusable by other HTML blueprints."""
    headers = response.headers
    if response.mimetype == "text/html":
        headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "same-origin")
    return response


def dashboard_blueprint(name: str, import_name: str, *, login: bool = True) -> Blueprint:
    """A blueprint with the security headers and, unless ``login=False``, the login guard.

    Hooks are attached here, once, when the module creating the blueprint is imported: an app
    factory called many times (tests) must not attach them again.
    """
    bp = Blueprint(name, import_name)
    if login:
        bp.before_request(require_login)
    bp.after_request(add_security_headers)
    return bp
