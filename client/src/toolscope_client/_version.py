"""The client's version and the API version it speaks, kept in step.

The major version of toolscope-client is the version of the Toolscope API it speaks: 1.x talks
to `/api/v1`. A server that answers `GET /api/v1/meta` says which API version it serves.
"""

__version__ = "1.0.0"
API_VERSION = 1
