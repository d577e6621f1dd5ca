"""conversation attribution: stored per-conversation "which tools make the agent expensive" (issue 24)

Revision ID: 8a0c2e4b6d7f
Revises: 6f8a0c2e4b5d
Create Date: 2026-11-27 21:00:00.000000

The tables the tool-cost chart reads (webapp.models: ConversationAttribution,
ConversationToolCost). No backfill: a conversation without a state row is stale, and
webapp.services.attribution_store computes it (the chart, a bounded number per request, or
`refresh_stale`).
"""
from alembic import op
import sqlalchemy as sa

import webapp.db

# revision identifiers, used by Alembic.
revision = '8a0c2e4b6d7f'
down_revision = '6f8a0c2e4b5d'
branch_labels = None
depends_on = None

_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table(
        'conversation_attribution',
        sa.Column('conversation_id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('revision', sa.BigInteger(), nullable=False),
        sa.Column('pending_counts', sa.Boolean(), nullable=False),
        sa.Column('prices', sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ['conversation_id'], ['conversation.id'],
            name=op.f('fk_conversation_attribution_conversation_id_conversation'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_conversation_attribution_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('conversation_id', name=op.f('pk_conversation_attribution')),
    )
    counts = lambda *names: [sa.Column(n, sa.BigInteger(), nullable=False) for n in names]  # noqa: E731
    op.create_table(
        'conversation_tool_cost',
        sa.Column('id', _ROW_ID, nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('conversation_id', sa.Integer(), nullable=False),
        sa.Column('bucket', webapp.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column('function_name', sa.String(length=255), nullable=False),
        *counts(
            'results', 'result_tokens', 'sends', 'resent_input_tokens', 'unpriced_input_tokens',
            'cost_femto', 'estimated_femto',
        ),
        sa.ForeignKeyConstraint(
            ['conversation_id'], ['conversation.id'],
            name=op.f('fk_conversation_tool_cost_conversation_id_conversation'),
            ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_conversation_tool_cost_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_conversation_tool_cost')),
    )
    op.create_index(
        op.f('ix_conversation_tool_cost_project_id_bucket'),
        'conversation_tool_cost', ['project_id', 'bucket'],
    )
    op.create_index(
        op.f('ix_conversation_tool_cost_conversation_id'),
        'conversation_tool_cost', ['conversation_id'],
    )


def downgrade():
    op.drop_index(op.f('ix_conversation_tool_cost_conversation_id'), 'conversation_tool_cost')
    op.drop_index(op.f('ix_conversation_tool_cost_project_id_bucket'), 'conversation_tool_cost')
    op.drop_table('conversation_tool_cost')
    op.drop_table('conversation_attribution')
