"""model_run and study: replays sent to a model, and what-ifs over many conversations (issue 25)

Revision ID: 2d4f6a8c0e1b
Revises: 0b5d7f9e1a3c
Create Date: 2026-11-27 17:30:00.000000
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

import webapp.db  # noqa: F401

# revision identifiers, used by Alembic.
revision = '2d4f6a8c0e1b'
down_revision = '0b5d7f9e1a3c'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
