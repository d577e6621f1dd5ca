"""model_run and study: replays sent to a model, and what-ifs over many conversations (issue 25)

Revision ID: 2d4f6a8c0e1b
Revises: 0b5d7f9e1a3c
Create Date: 2026-11-27 17:30:00.000000
"""
from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

import webapp.db

# revision identifiers, used by Alembic.
revision = '2d4f6a8c0e1b'
down_revision = '0b5d7f9e1a3c'
branch_labels = None
depends_on = None


JSON = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')
TIME = webapp.db.UTCDateTime(timezone=True)
USD = sa.Numeric(precision=18, scale=9)


def upgrade():
    op.create_table(
        'study',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('spec', JSON, nullable=False),
        sa.Column('report', JSON, nullable=True),
        sa.Column('max_cost_usd', USD, nullable=True),
        sa.Column('cost_usd', USD, nullable=True),
        sa.Column('runs_total', sa.Integer(), nullable=False),
        sa.Column('runs_done', sa.Integer(), nullable=False),
        sa.Column('runs_failed', sa.Integer(), nullable=False),
        sa.Column('concurrency', sa.Integer(), nullable=False),
        sa.Column('backoff_until', TIME, nullable=True),
        sa.Column('message', sa.Text(), nullable=True),
        sa.Column('created_at', TIME, nullable=False),
        sa.Column('started_at', TIME, nullable=True),
        sa.Column('finished_at', TIME, nullable=True),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_study_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_study')),
    )
    op.create_index(
        op.f('ix_study_project_id_created_at'), 'study', ['project_id', 'created_at']
    )
    op.create_table(
        'model_run',
        sa.Column('id', sa.String(length=40), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('conversation_id', sa.Integer(), nullable=False),
        sa.Column('connection_id', sa.Integer(), nullable=True),
        sa.Column('connection_name', sa.String(length=200), nullable=False),
        sa.Column('study_id', sa.String(length=40), nullable=True),
        sa.Column('variant', sa.String(length=16), nullable=True),
        sa.Column('status', sa.String(length=16), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=False),
        sa.Column('format', sa.String(length=32), nullable=False),
        sa.Column('options', JSON, nullable=False),
        sa.Column('edits', JSON, nullable=False),
        sa.Column('as_of', TIME, nullable=True),
        sa.Column('request', JSON, nullable=False),
        sa.Column('request_key', sa.String(length=64), nullable=False),
        sa.Column('response', JSON, nullable=True),
        sa.Column('next_action', JSON, nullable=True),
        sa.Column('recorded_action', JSON, nullable=True),
        sa.Column('comparison', JSON, nullable=True),
        sa.Column('input_tokens', sa.Integer(), nullable=True),
        sa.Column('output_tokens', sa.Integer(), nullable=True),
        sa.Column('cost_usd', USD, nullable=True),
        sa.Column('latency_ms', sa.Integer(), nullable=True),
        sa.Column('error_status', sa.Integer(), nullable=True),
        sa.Column('error_kind', sa.String(length=32), nullable=True),
        sa.Column('error_message', sa.Text(), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('lease_owner', sa.String(length=100), nullable=True),
        sa.Column('lease_until', TIME, nullable=True),
        sa.Column('created_at', TIME, nullable=False),
        sa.Column('started_at', TIME, nullable=True),
        sa.Column('finished_at', TIME, nullable=True),
        sa.Column('cached_from', sa.String(length=40), nullable=True),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_model_run_project_id_project'), ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['conversation_id'], ['conversation.id'],
            name=op.f('fk_model_run_conversation_id_conversation'), ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['connection_id'], ['model_connection.id'],
            name=op.f('fk_model_run_connection_id_model_connection'), ondelete='SET NULL',
        ),
        sa.ForeignKeyConstraint(
            ['study_id'], ['study.id'],
            name=op.f('fk_model_run_study_id_study'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_model_run')),
    )
    op.create_index(op.f('ix_model_run_project_id'), 'model_run', ['project_id'])
    op.create_index(op.f('ix_model_run_connection_id'), 'model_run', ['connection_id'])
    op.create_index(op.f('ix_model_run_study_id'), 'model_run', ['study_id'])
    op.create_index(op.f('ix_model_run_request_key'), 'model_run', ['request_key'])
    op.create_index(
        op.f('ix_model_run_conversation_id_created_at'),
        'model_run', ['conversation_id', 'created_at'],
    )
    op.create_index(
        op.f('ix_model_run_status_created_at'), 'model_run', ['status', 'created_at']
    )


def downgrade():
    op.drop_table('model_run')
    op.drop_table('study')
