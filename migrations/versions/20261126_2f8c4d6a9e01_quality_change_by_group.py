"""Quality changes indexed by group: the newest change of one vendor or annotator is one
index lookup, however many changes the dataset's other groups have.

Revision ID: 2f8c4d6a9e01
Revises: 6a1f3e9c2d84
Create Date: 2026-11-26 08:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "2f8c4d6a9e01"
down_revision: str | Sequence[str] | None = "6a1f3e9c2d84"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_quality_change_group", "quality_change",
                    ["dataset_id", "grouping", "group_name", "detected_at"])


def downgrade() -> None:
    op.drop_index("ix_quality_change_group", table_name="quality_change")
