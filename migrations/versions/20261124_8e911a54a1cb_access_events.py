"""Access events: who revoked a token or (de)activated a user, and when.

Revision ID: 8e911a54a1cb
Revises: f1b4c9d19117
Create Date: 2026-11-24 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '8e911a54a1cb'
down_revision: str | Sequence[str] | None = 'f1b4c9d19117'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('access_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('workspace_id', sa.Integer(), nullable=False),
    sa.Column('action', sa.Enum('token_revoked', 'user_deactivated', 'user_reactivated', name='access_action',
                                native_enum=False, create_constraint=True, length=24), nullable=False),
    sa.Column('actor', sa.String(length=320), nullable=False),
    sa.Column('actor_id', sa.Integer(), nullable=True),
    sa.Column('user_id', sa.Integer(), nullable=True),
    sa.Column('token_id', sa.Integer(), nullable=True),
    sa.Column('subject', sa.String(length=400), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    sa.ForeignKeyConstraint(['actor_id'], ['users.id'], name=op.f('fk_access_event_actor_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['token_id'], ['api_token.id'], name=op.f('fk_access_event_token_id_api_token'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_access_event_user_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['workspace_id'], ['workspace.id'], name=op.f('fk_access_event_workspace_id_workspace'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_access_event'))
    )
    with op.batch_alter_table('access_event', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_access_event_workspace_id_created_at'), ['workspace_id', 'created_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('access_event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_access_event_workspace_id_created_at'))
    op.drop_table('access_event')
