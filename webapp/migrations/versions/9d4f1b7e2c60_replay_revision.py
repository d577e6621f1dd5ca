"""replay cache: conversation.revision and replay_state

Revision ID: 9d4f1b7e2c60
Revises: 7c2e4b9a1f03
Create Date: 2026-11-24 03:45:00.000000

Every write that changes what the replay reads of a conversation bumps its revision (in the
UPDATE that sets updated_at); a trigger bumps replay_state's version when a conversation is
deleted (SQLite may reuse its row id). See webapp/models.py and
webapp/services/replay_cache.py. The trigger statements are frozen here as they are there.
"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '9d4f1b7e2c60'
down_revision = '7c2e4b9a1f03'
branch_labels = None
depends_on = None

_BUMP = (
    "INSERT INTO replay_state (id, version) VALUES (1, 1) "
    "ON CONFLICT (id) DO UPDATE SET version = replay_state.version + 1"
)
_EVENTS = (("conversation", "DELETE"),)


def _name(table, when):
    return f"replay_state_{table}_{when.split()[0].lower()}"


def upgrade():
    with op.batch_alter_table('conversation', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('revision', sa.BigInteger(), server_default='0', nullable=False)
        )
    op.create_table(
        'replay_state',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('version', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_replay_state')),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE OR REPLACE FUNCTION replay_state_bump() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN {_BUMP}; RETURN NULL; END $$"
        )
        for table, when in _EVENTS:
            op.execute(
                f"CREATE OR REPLACE TRIGGER {_name(table, when)} AFTER {when} ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION replay_state_bump()"
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
        op.execute("DROP FUNCTION IF EXISTS replay_state_bump()")
    op.drop_table('replay_state')
    with op.batch_alter_table('conversation', schema=None) as batch_op:
        batch_op.drop_column('revision')
