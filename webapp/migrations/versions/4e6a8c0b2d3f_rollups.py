"""roll-ups: per project x tool x bucket and per project x model x bucket (issue 24)

Revision ID: 4e6a8c0b2d3f
Revises: 2d4f6a8c0e1b
Create Date: 2026-11-27 17:30:00.000000
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

import webapp.db  # noqa: F401

# revision identifiers, used by Alembic.
revision = '4e6a8c0b2d3f'
down_revision = '2d4f6a8c0e1b'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
