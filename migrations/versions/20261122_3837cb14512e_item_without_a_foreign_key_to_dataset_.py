"""Item without a foreign key to dataset: one trigger call per imported item was the cost.

Revision ID: 3837cb14512e
Revises: 7e6dae6ceffa
Create Date: 2026-11-22 08:13:51.049567
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '3837cb14512e'
down_revision: str | Sequence[str] | None = '7e6dae6ceffa'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('item', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_item_dataset_id_dataset'), type_='foreignkey')



def downgrade() -> None:
    with op.batch_alter_table('item', schema=None) as batch_op:
        batch_op.create_foreign_key(batch_op.f('fk_item_dataset_id_dataset'), 'dataset', ['dataset_id'], ['id'], ondelete='CASCADE')

