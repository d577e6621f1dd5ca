"""rare status indexes: the explorer's no-response, not-captured and redacted filters by index

Revision ID: ce4f6b8d0a2c
Revises: bd3f5a7c9e1b
Create Date: 2026-11-28 01:20:00.000000

Two partial indexes of tool_invocation, (project_id, created_at, id) as the errors' one
(ac2e4f6b8d0a), so that a rare status walks its own calls newest first instead of every call of
the project (1.6 s at 1,000,000 calls with none matching; issue 24):
- ix_tool_invocation_no_response, over the calls without a response: `status=no-response` and
  `status=not-captured` (both conditions begin with `response IS NULL`);
- ix_tool_invocation_redacted, over the calls with redactions: `status=redacted`.
Each holds only its rows (calls awaiting a result; calls a rule redacted), so a write pays for
them only when it stores such a call.

Cost: a plain CREATE INDEX (Alembic runs migrations in a transaction), reading the whole table
and blocking writes to tool_invocation while it builds. On a large PostgreSQL database, create
them CONCURRENTLY by hand first (same names; IF NOT EXISTS makes this a no-op):
    CREATE INDEX CONCURRENTLY ix_tool_invocation_no_response ON tool_invocation
      (project_id, created_at, id) WHERE response IS NULL;
    CREATE INDEX CONCURRENTLY ix_tool_invocation_redacted ON tool_invocation
      (project_id, created_at, id) WHERE redactions IS NOT NULL;
"""
from alembic import op

# revision identifiers, used by Alembic.
revision = 'ce4f6b8d0a2c'
down_revision = 'bd3f5a7c9e1b'
branch_labels = None
depends_on = None

INDEXES = {
    "ix_tool_invocation_no_response": "response IS NULL",
    "ix_tool_invocation_redacted": "redactions IS NOT NULL",
}


def upgrade():
    for name, condition in INDEXES.items():
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON tool_invocation (project_id, created_at, id) "
            f"WHERE {condition}"
        )


def downgrade():
    for name in INDEXES:
        op.execute(f"DROP INDEX IF EXISTS {name}")
