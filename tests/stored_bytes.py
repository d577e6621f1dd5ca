"""The database as it lies on disk, for the tests that grep stored bytes for secrets or
unredacted content (tests/test_redaction_everywhere.py, tests/test_redaction_model_secrets.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa

from webapp.db import db


def database_bytes(app) -> bytes:
    """The database as stored: the SQLite file and its WAL, or a pg_dump."""
    url = sa.engine.make_url(app.config["DATABASE_URL"])
    with app.app_context():
        db.session.remove()
        if url.get_backend_name() == "sqlite":
            with db.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            db.engine.dispose()
            path = Path(url.database)
            files = [path, path.with_name(path.name + "-wal")]
            return b"".join(f.read_bytes() for f in files if f.exists())
        db.engine.dispose()
    if shutil.which("pg_dump") is None:
        pytest.skip("pg_dump is not installed")
    dump = subprocess.run(
        [
            "pg_dump",
            "--host",
            url.host or "127.0.0.1",
            "--port",
            str(url.port or 5432),
            "--username",
            url.username or "postgres",
            "--no-password",
            url.database,
        ],
        capture_output=True,
        check=True,
        timeout=120,
    )
    return dump.stdout
