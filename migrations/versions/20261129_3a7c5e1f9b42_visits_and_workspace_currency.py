"""When each user was last seen (the pages' "since my last visit"), the workspace's currency
(the one its costs are shown in; USD unless set), and an index that reads an annotator's
newest labels on a dataset without scanning the dataset's labels.

Revision ID: 3a7c5e1f9b42
Revises: 7d3c1b9e5a42
Create Date: 2026-11-28 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3a7c5e1f9b42"
down_revision: str | Sequence[str] | None = "7d3c1b9e5a42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE on both databases: SQLite's batch mode would copy and drop these parent
    # tables, and dropping one deletes the rows of every table that cascades from it.
    op.add_column("users", sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("workspace", sa.Column("currency", sa.String(8), nullable=False, server_default="USD"))
    # On PostgreSQL the index is made on every partition of the partitioned table.
    op.create_index("ix_annotation_annotator_time", "annotation",
                    ["dataset_id", "annotator_id", sa.text("coalesce(annotated_at, created_at)")])


def downgrade() -> None:
    op.drop_index("ix_annotation_annotator_time", table_name="annotation")
    for table, column in (("workspace", "currency"), ("users", "last_seen_at")):
        # SQLite drops a column in place since 3.35 (no copy of the table, so no cascade).
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
