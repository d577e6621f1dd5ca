"""The release number: pyproject.toml's ``version``, for the OpenAPI document and cache-busting
static URLs (``webapp.__version__`` re-exports it)."""

__version__ = "0.1.0"
