"""model_connection: a project's connections to model providers (issue 25)

Revision ID: 0b5d7f9e1a3c
Revises: a6c3e9f2b4d1
Create Date: 2026-11-27 17:30:00.000000
"""
from alembic import op  # noqa: F401
import sqlalchemy as sa  # noqa: F401

import webapp.db  # noqa: F401

# revision identifiers, used by Alembic.
revision = '0b5d7f9e1a3c'
down_revision = 'a6c3e9f2b4d1'
branch_labels = None
depends_on = None


def upgrade():
    pass


def downgrade():
    pass
