"""study preparation: a study's runs prepared by the run worker, not in the request (issue 25)

`study.prepared` counts the conversations whose runs are stored while the study is
`preparing`; the unique index keeps one run per study, conversation and variant, so a batch of
the preparation stored twice cannot queue a conversation twice.

Revision ID: 9b1d3f5a7c8e
Revises: 8a0c2e4b6d7f
Create Date: 2026-11-27 21:00:00.000000
"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = '9b1d3f5a7c8e'
down_revision = '8a0c2e4b6d7f'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('study') as batch_op:
        batch_op.add_column(
            sa.Column('prepared', sa.Integer(), server_default='0', nullable=False)
        )
    op.create_index(
        op.f('ix_model_run_study_id_conversation_id_variant'),
        'model_run',
        ['study_id', 'conversation_id', 'variant'],
        unique=True,
    )


def downgrade():
    op.drop_index(op.f('ix_model_run_study_id_conversation_id_variant'), table_name='model_run')
    with op.batch_alter_table('study') as batch_op:
        batch_op.drop_column('prepared')
