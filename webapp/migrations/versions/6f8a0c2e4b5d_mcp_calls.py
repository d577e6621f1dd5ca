"""mcp_call: how a tool call went through MCP, attached by the OTLP projection (issue 21)

Revision ID: 6f8a0c2e4b5d
Revises: 4e6a8c0b2d3f
Create Date: 2026-11-27 17:50:00.000000
"""
import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = '6f8a0c2e4b5d'
down_revision = '4e6a8c0b2d3f'
branch_labels = None
depends_on = None

_ROW_ID = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table(
        'mcp_call',
        sa.Column('tool_invocation_id', _ROW_ID, nullable=False),
        sa.Column('project_id', sa.Integer(), nullable=False),
        sa.Column('server', sa.String(length=255), nullable=False),
        sa.Column('method', sa.String(length=64), nullable=False),
        sa.Column('transport', sa.String(length=32), nullable=True),
        sa.Column('session_id', sa.String(length=255), nullable=True),
        sa.Column('request_id', sa.String(length=255), nullable=True),
        sa.Column('protocol_version', sa.String(length=32), nullable=True),
        sa.Column('duration_ms', sa.Float(), nullable=True),
        sa.Column('server_duration_ms', sa.Float(), nullable=True),
        sa.Column('error_type', sa.String(length=64), nullable=True),
        sa.Column('trace_id', sa.String(length=32), nullable=False),
        sa.Column('span_id', sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ['project_id'], ['project.id'],
            name=op.f('fk_mcp_call_project_id_project'), ondelete='CASCADE',
        ),
        sa.ForeignKeyConstraint(
            ['tool_invocation_id'], ['tool_invocation.id'],
            name=op.f('fk_mcp_call_tool_invocation_id_tool_invocation'), ondelete='CASCADE',
        ),
        sa.PrimaryKeyConstraint('tool_invocation_id', name=op.f('pk_mcp_call')),
    )
    op.create_index(
        op.f('ix_mcp_call_project_id_server'), 'mcp_call', ['project_id', 'server'], unique=False
    )


def downgrade():
    op.drop_index(op.f('ix_mcp_call_project_id_server'), table_name='mcp_call')
    op.drop_table('mcp_call')
