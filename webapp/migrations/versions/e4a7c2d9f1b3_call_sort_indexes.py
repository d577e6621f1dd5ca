"""tool_invocation: indexes of the calls explorer's duration and size sorts

Revision ID: e4a7c2d9f1b3
Revises: b8e3f0a2d4c6
Create Date: 2026-11-27 15:20:00.000000

(project_id, <sort key>, id) for the duration and the size sort, so that a page of
`/calls?sort=duration` walks an index from its cursor instead of sorting every call of the
project (13 s at 1M calls). The key expressions are frozen here as webapp/models.py writes
them (the explorer's query uses the same text, or SQLite would not use the index).

Cost: a plain CREATE INDEX (Alembic runs migrations in a transaction, where PostgreSQL refuses
CREATE INDEX CONCURRENTLY): it reads the whole table and blocks writes to tool_invocation
while it builds, about 2-5 s per index per million calls. Reads go on. On a large PostgreSQL
database, create them CONCURRENTLY by hand first (same names, IF NOT EXISTS makes this a no-op):
    CREATE INDEX CONCURRENTLY ix_tool_invocation_duration ON tool_invocation (project_id,
      (coalesce(CAST(EXTRACT(epoch FROM ended_at - started_at) AS FLOAT) * 1000.0, -1.0)), id);
    CREATE INDEX CONCURRENTLY ix_tool_invocation_size ON tool_invocation (project_id,
      (coalesce(response_bytes, -1)), id);
"""
from alembic import op

# revision identifiers, used by Alembic.
revision = 'e4a7c2d9f1b3'
down_revision = 'b8e3f0a2d4c6'
branch_labels = None
depends_on = None

_DURATION = {
    "sqlite": "coalesce(round((julianday(substr(ended_at, 1, 19)) - "
    "julianday(substr(started_at, 1, 19))) * 86400.0) * 1000.0 + "
    "(CAST(substr(ended_at, 21, 6) AS INTEGER) - "
    "CAST(substr(started_at, 21, 6) AS INTEGER)) / 1000.0, -1.0)",
    "postgresql": "coalesce(CAST(EXTRACT(epoch FROM ended_at - started_at) AS FLOAT) "
    "* 1000.0, -1.0)",
}
_SIZE = "coalesce(response_bytes, -1)"


def upgrade():
    dialect = op.get_bind().dialect.name
    for name, key in (
        ("ix_tool_invocation_duration", _DURATION[dialect]),
        ("ix_tool_invocation_size", _SIZE),
    ):
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON tool_invocation (project_id, ({key}), id)"
        )


def downgrade():
    for name in ("ix_tool_invocation_duration", "ix_tool_invocation_size"):
        op.execute(f"DROP INDEX IF EXISTS {name}")
