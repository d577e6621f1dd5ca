"""tool cost roll-up: the stored tool costs summed per project x tool x hour (issue 24)

Revision ID: bd3f5a7c9e1b
Revises: ac2e4f6b8d0a
Create Date: 2026-11-28 00:10:00.000000

The table the Costs page and the tool charts read for whole hours (webapp.models:
ProjectToolCost), filled here from conversation_tool_cost, and a conversation's rows indexed by hour; from then on the writes of those
rows keep it in step (webapp.ingest.tool_cost_rollup).
"""
from alembic import op
import sqlalchemy as sa

import webapp.db

# revision identifiers, used by Alembic.
revision = 'bd3f5a7c9e1b'
down_revision = 'ac2e4f6b8d0a'
branch_labels = None
depends_on = None

_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')
_SUMS = (
    'results', 'result_tokens', 'sends', 'resent_input_tokens', 'unpriced_input_tokens',
    'cost_femto', 'estimated_femto',
)


def upgrade():
    op.create_table(
        'project_tool_cost',
        sa.Column('id', _ROW_ID, nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('bucket', webapp.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column('function_name', sa.String(length=255), nullable=False),
        sa.Column('pieces', sa.BigInteger(), nullable=False),
        *[sa.Column(n, sa.BigInteger(), nullable=False) for n in _SUMS],
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_project_tool_cost_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_project_tool_cost')),
        sa.UniqueConstraint(
            'project_id', 'bucket', 'function_name',
            name=op.f('uq_project_tool_cost_project_id_bucket_function_name'),
        ),
    )
    # A conversation's rows of a range: the pieces the reads take away from the roll-up.
    op.create_index(
        op.f('ix_conversation_tool_cost_conversation_id_bucket'),
        'conversation_tool_cost', ['conversation_id', 'bucket'],
    )
    op.drop_index(op.f('ix_conversation_tool_cost_conversation_id'), 'conversation_tool_cost')
    # The backfill: one INSERT ... SELECT, the same sums the writes keep.
    sums = ', '.join(f'SUM({n})' for n in _SUMS)
    op.execute(
        f"INSERT INTO project_tool_cost (project_id, bucket, function_name, pieces, "
        f"{', '.join(_SUMS)}) "
        f"SELECT project_id, bucket, function_name, COUNT(*), {sums} "
        f"FROM conversation_tool_cost GROUP BY project_id, bucket, function_name"
    )


def downgrade():
    op.create_index(
        op.f('ix_conversation_tool_cost_conversation_id'),
        'conversation_tool_cost', ['conversation_id'],
    )
    op.drop_index(
        op.f('ix_conversation_tool_cost_conversation_id_bucket'), 'conversation_tool_cost'
    )
    op.drop_table('project_tool_cost')
