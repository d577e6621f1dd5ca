"""tool_invocation.stamp: a number that changes with every write to a tool call row

Revision ID: b8e3f0a2d4c6
Revises: 9d4f1b7e2c60
Create Date: 2026-11-24 11:45:00.000000

The replay's loader reads (id, stamp) of the rows its worker made objects of before, and reads a
row whole only when its stamp moved (webapp.services.row_memo). The write paths set a stamp;
triggers set one for any other write. Rows stored before this migration keep NULL: they are
read whole at every load, as before, until a write gives them a stamp (no table rewrite here).
The trigger statements are frozen here as they are in webapp/models.py.
"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'b8e3f0a2d4c6'
down_revision = '9d4f1b7e2c60'
branch_labels = None
depends_on = None

_SQLITE = (
    "CREATE TRIGGER IF NOT EXISTS tool_invocation_stamp_insert AFTER INSERT ON tool_invocation "
    "WHEN new.stamp IS NULL BEGIN "
    "UPDATE tool_invocation SET stamp = random() WHERE id = new.id; END",
    "CREATE TRIGGER IF NOT EXISTS tool_invocation_stamp_update AFTER UPDATE ON tool_invocation "
    "WHEN new.stamp IS old.stamp BEGIN "
    "UPDATE tool_invocation SET stamp = random() WHERE id = new.id; END",
)
_PG = (
    "CREATE OR REPLACE FUNCTION tool_invocation_stamp() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN NEW.stamp := floor(random() * 4611686018427387904)::bigint; RETURN NEW; END $$",
    "CREATE OR REPLACE TRIGGER tool_invocation_stamp_insert BEFORE INSERT ON tool_invocation "
    "FOR EACH ROW WHEN (NEW.stamp IS NULL) EXECUTE FUNCTION tool_invocation_stamp()",
    "CREATE OR REPLACE TRIGGER tool_invocation_stamp_update BEFORE UPDATE ON tool_invocation "
    "FOR EACH ROW WHEN (NEW.stamp IS NOT DISTINCT FROM OLD.stamp) "
    "EXECUTE FUNCTION tool_invocation_stamp()",
)
_TRIGGERS = ("tool_invocation_stamp_insert", "tool_invocation_stamp_update")


def upgrade():
    # A plain ADD COLUMN on both databases (batch mode would copy the table on SQLite).
    op.add_column('tool_invocation', sa.Column('stamp', sa.BigInteger(), nullable=True))
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in _PG if postgresql else _SQLITE:
        op.execute(statement)


def downgrade():
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in _TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON tool_invocation" if postgresql else ""))
    if postgresql:
        op.execute("DROP FUNCTION IF EXISTS tool_invocation_stamp()")
    # SQLite 3.35+ drops a column in place; batch mode would copy the table and lose the
    # search triggers.
    op.drop_column('tool_invocation', 'stamp')
