"""saved_view: a list page's filters under a name, per project

Revision ID: a6c3e9f2b4d1
Revises: e4a7c2d9f1b3
Create Date: 2026-11-27 15:20:00.000000
"""
from alembic import op
import sqlalchemy as sa

import webapp.db

# revision identifiers, used by Alembic.
revision = 'a6c3e9f2b4d1'
down_revision = 'e4a7c2d9f1b3'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'saved_view',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('page', sa.String(length=32), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('query', sa.Text(), nullable=False),
        sa.Column('created_at', webapp.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_saved_view_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_saved_view')),
        sa.UniqueConstraint(
            'project_id', 'page', 'name', name=op.f('uq_saved_view_project_id_page_name')
        ),
    )


def downgrade():
    op.drop_table('saved_view')
