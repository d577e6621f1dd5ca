"""Migrations walk up and down on both databases and match the models exactly."""

from __future__ import annotations

import warnings

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from flask_migrate import downgrade, upgrade

from webapp.db import db
from webapp.models import CALL_SORT_INDEXES, is_search_object


def _drop_everything() -> None:
    db.drop_all()
    with db.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")


def _raw_indexes(conn, table: str) -> list[dict]:
    if conn.dialect.name == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = :t"
    else:
        sql = "SELECT indexname AS name FROM pg_indexes WHERE tablename = :t"
    return [dict(r._mapping) for r in conn.execute(sa.text(sql), {"t": table})]


def test_migrations_walk_up_and_down_and_match_models(app):
    with app.app_context():
        _drop_everything()
        upgrade()
        with db.engine.connect() as conn:
            # The full-text search objects are the database's own (webapp/models.py).
            context = MigrationContext.configure(
                conn, opts={"include_name": lambda name, *_: not is_search_object(name)}
            )
            with warnings.catch_warnings():
                # SQLAlchemy cannot reflect SQLite's indexes on expressions (the explorer's).
                warnings.filterwarnings(
                    "ignore", "Skipped unsupported reflection of expression-based index"
                )
                diff = compare_metadata(context, db.metadata)
            # The migrations make the explorer's sort indexes, as create_all does (issue 24).
            indexes = {ix["name"] for ix in _raw_indexes(conn, "tool_invocation")}
            assert set(CALL_SORT_INDEXES) <= indexes, indexes
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
