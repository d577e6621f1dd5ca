"""roll-ups: per project x tool x bucket and per project x model x bucket (issue 24)

Revision ID: 4e6a8c0b2d3f
Revises: 2d4f6a8c0e1b
Create Date: 2026-11-27 17:30:00.000000

The tables the tools and costs pages read (webapp.models: ToolRollup, ModelRollup), filled from
the rows already stored: the backfill is webapp.ingest.rollups.rebuild, the recomputation the
drift test checks the write paths against. It reads the tables as they are at this revision;
a later change to them gives this migration a frozen copy of the code.
"""
from alembic import op
import sqlalchemy as sa

import webapp.db

# revision identifiers, used by Alembic.
revision = '4e6a8c0b2d3f'
down_revision = '2d4f6a8c0e1b'
branch_labels = None
depends_on = None

_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def _common(name):
    return (
        sa.Column('id', _ROW_ID, nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('span', sa.Integer(), nullable=False),
        sa.Column('bucket', webapp.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f(f'fk_{name}_project_id_project'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('id', name=op.f(f'pk_{name}')),
    )


def upgrade():
    counts = lambda *names: [sa.Column(n, sa.BigInteger(), nullable=False) for n in names]  # noqa: E731
    op.create_table(
        'tool_rollup',
        *_common('tool_rollup'),
        sa.Column('function_name', sa.String(length=255), nullable=False),
        *counts(
            'calls', 'errors', 'responses', 'missing', 'bytes_n', 'bytes_sum', 'tokens_n',
            'tokens_sum', 'timed',
        ),
        sa.Column('durations', sa.Text(), nullable=True),
        sa.Column('sizes', sa.Text(), nullable=True),
        sa.Column('last_at', webapp.db.UTCDateTime(timezone=True), nullable=True),
        sa.UniqueConstraint(
            'project_id', 'span', 'bucket', 'function_name',
            name=op.f('uq_tool_rollup_project_id_span_bucket_function_name'),
        ),
    )
    op.create_table(
        'model_rollup',
        *_common('model_rollup'),
        sa.Column('model', sa.String(length=200), nullable=False),
        *counts(
            'service_calls', 'input_tokens', 'output_tokens', 'cached_tokens', 'cost_nano',
            'unpriced',
        ),
        sa.UniqueConstraint(
            'project_id', 'span', 'bucket', 'model',
            name=op.f('uq_model_rollup_project_id_span_bucket_model'),
        ),
    )
    from webapp.ingest.rollups import rebuild

    rebuild(executor=op.get_bind())


def downgrade():
    op.drop_table('model_rollup')
    op.drop_table('tool_rollup')
