"""call status indexes: the explorer's status filters counted by index (issue 24)

Revision ID: ac2e4f6b8d0a
Revises: 9b1d3f5a7c8e
Create Date: 2026-11-27 22:00:00.000000

Two indexes of tool_invocation, so that two pages stop growing with the number of calls:
- ix_tool_invocation_error, (project_id, created_at, id) over the errors only: the capped total
  of `/calls?status=error` (at most 10,000) read every call of the project to find its errors
  (3 % of them: all 100k calls, x2.2 from 100k to 1M); it now counts them from this index. The
  condition is the explorer's text (`is_error IS 1` on SQLite, `IS true` on PostgreSQL), as
  webapp/models.py writes it: a planner uses a partial index only for a query that implies it.
- (project_id, function_name, created_at, id): `/tools/usage?name=` finds the most recent
  conversations using a tool walking its calls newest first, instead of grouping all of them.

Cost: a plain CREATE INDEX (Alembic runs migrations in a transaction, where PostgreSQL refuses
CREATE INDEX CONCURRENTLY): it reads the whole table and blocks writes to tool_invocation
while it builds (the partial one writes only the errors). Reads go on. On a large PostgreSQL
database, create them CONCURRENTLY by hand first (same names, IF NOT EXISTS makes this a no-op):
    CREATE INDEX CONCURRENTLY ix_tool_invocation_error ON tool_invocation
      (project_id, created_at, id) WHERE is_error IS true;
    CREATE INDEX CONCURRENTLY ix_tool_invocation_project_id_function_name_created_at_id
      ON tool_invocation (project_id, function_name, created_at, id);
"""
from alembic import op

# revision identifiers, used by Alembic.
revision = 'ac2e4f6b8d0a'
down_revision = '9b1d3f5a7c8e'
branch_labels = None
depends_on = None

_ERROR = "ix_tool_invocation_error"
_TOOL_TIME = "ix_tool_invocation_project_id_function_name_created_at_id"
_IS_ERROR = {"sqlite": "is_error IS 1", "postgresql": "is_error IS true"}


def upgrade():
    dialect = op.get_bind().dialect.name
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {_ERROR} ON tool_invocation (project_id, created_at, id) "
        f"WHERE {_IS_ERROR[dialect]}"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {_TOOL_TIME} ON tool_invocation "
        "(project_id, function_name, created_at, id)"
    )


def downgrade():
    for name in (_ERROR, _TOOL_TIME):
        op.execute(f"DROP INDEX IF EXISTS {name}")
