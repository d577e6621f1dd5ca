"""study preparation: a study's runs prepared by the run worker, not in the request (issue 25)

Revision ID: 9b1d3f5a7c8e
Revises: 8a0c2e4b6d7f
Create Date: 2026-11-27 21:00:00.000000
"""

# revision identifiers, used by Alembic.
revision = '9b1d3f5a7c8e'
down_revision = '8a0c2e4b6d7f'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
