"""conversation attribution: stored per-conversation "which tools make the agent expensive" (issue 24)

Revision ID: 8a0c2e4b6d7f
Revises: 6f8a0c2e4b5d
Create Date: 2026-11-27 21:00:00.000000
"""

# revision identifiers, used by Alembic.
revision = '8a0c2e4b6d7f'
down_revision = '6f8a0c2e4b5d'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
