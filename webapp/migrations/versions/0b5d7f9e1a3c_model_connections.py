"""model_connection: a project's connections to model providers (issue 25)

Revision ID: 0b5d7f9e1a3c
Revises: a6c3e9f2b4d1
Create Date: 2026-11-27 17:30:00.000000
"""
from alembic import op
import sqlalchemy as sa

import webapp.db

# revision identifiers, used by Alembic.
revision = '0b5d7f9e1a3c'
down_revision = 'a6c3e9f2b4d1'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        'model_connection',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=100), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('base_url', sa.String(length=2048), nullable=False),
        sa.Column('default_model', sa.String(length=200), nullable=True),
        sa.Column('headers_encrypted', sa.Text(), nullable=True),
        sa.Column('secret_encrypted', sa.Text(), nullable=True),
        sa.Column('secret_env', sa.String(length=200), nullable=True),
        sa.Column('created_at', webapp.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column('updated_at', webapp.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_model_connection_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_model_connection')),
        sa.UniqueConstraint(
            'project_id', 'name', name=op.f('uq_model_connection_project_id_name')
        ),
    )


def downgrade():
    op.drop_table('model_connection')
