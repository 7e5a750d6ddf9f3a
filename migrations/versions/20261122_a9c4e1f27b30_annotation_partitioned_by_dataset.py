"""PostgreSQL: the annotation table is partitioned by dataset (LIST), one partition each.

A first bulk load into a dataset then fills a fresh table and builds its key index in
one sorted pass, and attaches it (``auditor.db.partitions``). Existing rows move into
one partition per dataset. SQLite keeps its plain table: nothing to change there.

Revision ID: a9c4e1f27b30
Revises: 5b1f0c2d9a47
Create Date: 2026-11-22 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a9c4e1f27b30"
down_revision: str | Sequence[str] | None = "5b1f0c2d9a47"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("dataset_id, item_id, annotator_id, label, annotated_at, batch_id, data_version, created_at")


def _columns() -> list[sa.Column]:
    return [
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.BigInteger(), nullable=False),
        sa.Column("annotator_id", sa.Integer(), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=False),
        sa.Column("annotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("batch_id", sa.BigInteger(), nullable=False),
        sa.Column("data_version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    ]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE annotation RENAME TO annotation_unpartitioned")
    op.execute("ALTER TABLE annotation_unpartitioned RENAME CONSTRAINT pk_annotation "
               "TO pk_annotation_unpartitioned")
    op.create_table("annotation", *_columns(),
                    sa.PrimaryKeyConstraint("dataset_id", "item_id", "annotator_id", name=op.f("pk_annotation")),
                    postgresql_partition_by="LIST (dataset_id)")
    datasets = [row[0] for row in op.get_bind().execute(
        sa.text("SELECT DISTINCT dataset_id FROM annotation_unpartitioned ORDER BY 1"))]
    for d in datasets:
        name = f"annotation_p{int(d)}"
        op.execute(f"CREATE TABLE {name} (LIKE annotation INCLUDING DEFAULTS, "
                   f"CONSTRAINT ck_{name}_dataset CHECK (dataset_id = {int(d)}))")
        op.execute(f"INSERT INTO {name} ({_COLUMNS}) SELECT {_COLUMNS} FROM annotation_unpartitioned "
                   f"WHERE dataset_id = {int(d)}")
        op.execute(f"ALTER TABLE {name} ADD CONSTRAINT {name}_pkey PRIMARY KEY (dataset_id, item_id, annotator_id)")
        op.execute(f"ALTER TABLE annotation ATTACH PARTITION {name} FOR VALUES IN ({int(d)})")
    op.drop_table("annotation_unpartitioned")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE annotation RENAME TO annotation_partitioned")
    op.execute("ALTER TABLE annotation_partitioned RENAME CONSTRAINT pk_annotation TO pk_annotation_partitioned")
    op.create_table("annotation", *_columns(),
                    sa.PrimaryKeyConstraint("dataset_id", "item_id", "annotator_id", name=op.f("pk_annotation")))
    op.execute(f"INSERT INTO annotation ({_COLUMNS}) SELECT {_COLUMNS} FROM annotation_partitioned")
    op.drop_table("annotation_partitioned")  # its partitions go with it
