"""call status indexes: the explorer's status filters counted by index (issue 24)

Revision ID: ac2e4f6b8d0a
Revises: 9b1d3f5a7c8e
Create Date: 2026-11-27 22:00:00.000000
"""

# revision identifiers, used by Alembic.
revision = 'ac2e4f6b8d0a'
down_revision = '9b1d3f5a7c8e'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
