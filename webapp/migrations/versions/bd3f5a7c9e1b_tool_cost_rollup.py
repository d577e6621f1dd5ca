"""reserved for issue 24 (stored tool costs rolled up per project x tool x hour)

Revision ID: bd3f5a7c9e1b
Revises: ac2e4f6b8d0a
Create Date: 2026-11-28 00:10:00.000000
"""

# revision identifiers, used by Alembic.
revision = 'bd3f5a7c9e1b'
down_revision = 'ac2e4f6b8d0a'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
