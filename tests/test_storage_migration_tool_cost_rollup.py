"""The tool-cost roll-up's migration (bd3f5a7c9e1b) fills the new table from the stored tool
costs of an existing database, and goes down leaving them as they were (issue 24). On SQLite
and on PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from dashboard_support import data
from factories import support_conversation
from flask_migrate import downgrade, upgrade

from webapp.auth import get_or_create_project
from webapp.db import db
from webapp.ingest import tool_cost_rollup
from webapp.services.attribution_store import refresh_stale

BEFORE = "ac2e4f6b8d0a"


def _tables() -> set[str]:
    return set(sa.inspect(db.engine).get_table_names())


def test_upgrade_fills_the_roll_up_from_stored_costs_and_downgrade_drops_it(app):
    with app.app_context():
        db.drop_all()
        with db.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE IF EXISTS alembic_version")
        upgrade()
        project_id = get_or_create_project("migrated").id
        db.session.commit()
    now = datetime.now(UTC)
    with data(app):
        for i in range(3):
            support_conversation(project_id, f"s{i}", at=now - timedelta(hours=2 * i))
    with app.app_context():
        refresh_stale(project_id, {})
        stored_costs = db.session.scalar(sa.text("SELECT COUNT(*) FROM conversation_tool_cost"))
        assert stored_costs > 0
        want = tool_cost_rollup.recompute()
        assert tool_cost_rollup.stored() == want
        assert len({key[1] for key in want}) >= 3  # three hours
        db.session.commit()

        downgrade(revision=BEFORE)
        assert "project_tool_cost" not in _tables()
        assert db.session.scalar(sa.text("SELECT COUNT(*) FROM conversation_tool_cost")) == (
            stored_costs
        )
        db.session.commit()

        upgrade()  # an existing database with stored costs: the roll-up is filled from them
        assert "project_tool_cost" in _tables()
        assert tool_cost_rollup.stored() == want
        db.session.commit()
