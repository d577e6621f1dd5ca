"""Migrations walk up and down on both databases and match the models exactly."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask_migrate import downgrade, upgrade

from webapp.db import db
from webapp.models import is_search_object


def _drop_everything() -> None:
    db.drop_all()
    with db.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")


def test_migrations_walk_up_and_down_and_match_models(app):
    with app.app_context():
        _drop_everything()
        upgrade()
        with db.engine.connect() as conn:
            # The full-text search objects are the database's own (webapp/models.py).
            context = MigrationContext.configure(
                conn, opts={"include_name": lambda name, *_: not is_search_object(name)}
            )
            diff = compare_metadata(context, db.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
        downgrade(revision="base")
        tables = set(sa.inspect(db.engine).get_table_names()) - {"alembic_version"}
        assert tables == set()
        upgrade()
        assert "tool_invocation" in sa.inspect(db.engine).get_table_names()


def test_sqlite_connections_use_wal_foreign_keys_and_busy_timeout(app):
    with app.app_context():
        if db.engine.dialect.name != "sqlite":
            return
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 10_000
