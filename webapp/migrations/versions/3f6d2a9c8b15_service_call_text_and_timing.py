"""service call text, reasoning and timing

Revision ID: 3f6d2a9c8b15
Revises: 3f6a1c9d2b7e
Create Date: 2026-11-23 21:35:00.000000

"""
from alembic import op
import sqlalchemy as sa

import webapp.db

# revision identifiers, used by Alembic.
revision = '3f6d2a9c8b15'
down_revision = '3f6a1c9d2b7e'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('service_call', schema=None) as batch_op:
        batch_op.add_column(sa.Column('started_at', webapp.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('ended_at', webapp.db.UTCDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('content', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('reasoning', sa.Text(), nullable=True))


def downgrade():
    with op.batch_alter_table('service_call', schema=None) as batch_op:
        batch_op.drop_column('reasoning')
        batch_op.drop_column('content')
        batch_op.drop_column('ended_at')
        batch_op.drop_column('started_at')
