"""api_state: one version number the API's per-worker key and rules cache checks

Revision ID: 7c2e4b9a1f03
Revises: 3f6d2a9c8b15
Create Date: 2026-11-24 00:40:00.000000

The triggers bump it in the transaction that changes a key, a project's price overrides or a
redaction rule (webapp/models.py, "What an API request's authentication ... depend on"). The
statements are frozen here as they are there.
"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '7c2e4b9a1f03'
down_revision = '3f6d2a9c8b15'
branch_labels = None
depends_on = None

_BUMP = (
    "INSERT INTO api_state (id, version) VALUES (1, 1) "
    "ON CONFLICT (id) DO UPDATE SET version = api_state.version + 1"
)
_EVENTS = (
    ("api_key", "UPDATE OF key_hash, revoked_at, project_id"),
    ("api_key", "DELETE"),
    ("project", "UPDATE OF price_overrides"),
    ("project", "DELETE"),
    ("redaction_rule", "INSERT"),
    ("redaction_rule", "UPDATE"),
    ("redaction_rule", "DELETE"),
)


def _name(table, when):
    return f"api_state_{table}_{when.split()[0].lower()}"


def upgrade():
    op.create_table(
        'api_state',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('version', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_api_state')),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION api_state_bump() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {_BUMP}; RETURN NULL; END $$"
        )
        for table, when in _EVENTS:
            op.execute(
                f"CREATE OR REPLACE TRIGGER {_name(table, when)} AFTER {when} ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION api_state_bump()"
            )
    else:
        for table, when in _EVENTS:
            op.execute(
                f"CREATE TRIGGER IF NOT EXISTS {_name(table, when)} AFTER {when} ON {table} "
                f"BEGIN {_BUMP}; END"
            )


def downgrade():
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table, when in _EVENTS:
        suffix = f" ON {table}" if postgresql else ""
        op.execute(f"DROP TRIGGER IF EXISTS {_name(table, when)}{suffix}")
    if postgresql:
        op.execute("DROP FUNCTION IF EXISTS api_state_bump()")
    op.drop_table('api_state')
