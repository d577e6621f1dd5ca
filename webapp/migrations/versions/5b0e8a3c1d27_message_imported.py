"""message.imported: rows stored by the import API are replayed as they were sent

Revision ID: 5b0e8a3c1d27
Revises: c743202694ec
Create Date: 2026-11-23 18:00:00.000000

"""
import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "5b0e8a3c1d27"
down_revision = "c743202694ec"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("imported", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade():
    with op.batch_alter_table("message", schema=None) as batch_op:
        batch_op.drop_column("imported")
