"""Quality over time: per-window vendor and annotator quality, detected changes, monitor state,
each dataset's kind of window (calendar week or import batch), and a BRIN index on
annotation.data_version for reading what arrived after a version.

Revision ID: 4c7e2a9b5d10
Revises: 9b3e52d1c7a4
Create Date: 2026-11-24 19:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "4c7e2a9b5d10"
down_revision: str | Sequence[str] | None = "9b3e52d1c7a4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _now() -> sa.Column:
    return sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("CURRENT_TIMESTAMP"),
                     nullable=False)


def upgrade() -> None:
    with op.batch_alter_table("dataset") as batch:
        batch.add_column(sa.Column("quality_window", sa.String(length=8), nullable=False, server_default="week"))
    # The annotations written after a data version: BRIN (versions grow with insertion order).
    op.create_index("ix_annotation_data_version", "annotation", ["data_version"], postgresql_using="brin")
    op.create_table(
        "quality_state",
        sa.Column("dataset_id", sa.Integer(), sa.ForeignKey("dataset.id", name="fk_quality_state_dataset_id_dataset",
                                                            ondelete="CASCADE"), nullable=False),
        sa.Column("data_version", sa.BigInteger(), nullable=False),
        sa.Column("state", _JSON, nullable=False),
        _now(),
        sa.PrimaryKeyConstraint("dataset_id", name="pk_quality_state"),
    )
    op.create_table(
        "quality_window",
        sa.Column("id", _BIGID, nullable=False),
        sa.Column("dataset_id", sa.Integer(), sa.ForeignKey("dataset.id", name="fk_quality_window_dataset_id_dataset",
                                                            ondelete="CASCADE"), nullable=False),
        sa.Column("grouping", sa.String(16), nullable=False),
        sa.Column("group_name", sa.String(512), nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("window_key", sa.BigInteger(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("window_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("n_items", sa.Double(), nullable=False),
        sa.Column("n_labels", sa.Integer(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("low", sa.Double(), nullable=True),
        sa.Column("high", sa.Double(), nullable=True),
        sa.Column("audit_run_id", sa.Integer(), sa.ForeignKey("audit_run.id",
                                                              name="fk_quality_window_audit_run_id_audit_run",
                                                              ondelete="SET NULL"), nullable=True),
        _now(),
        sa.PrimaryKeyConstraint("id", name="pk_quality_window"),
        sa.UniqueConstraint("dataset_id", "grouping", "group_name", "metric", "window_key",
                            name="uq_quality_window_key"),
    )
    op.create_index("ix_quality_window_series", "quality_window", ["dataset_id", "grouping", "window_key"])
    op.create_table(
        "quality_change",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), sa.ForeignKey("dataset.id", name="fk_quality_change_dataset_id_dataset",
                                                            ondelete="CASCADE"), nullable=False),
        sa.Column("audit_run_id", sa.Integer(), sa.ForeignKey("audit_run.id",
                                                              name="fk_quality_change_audit_run_id_audit_run",
                                                              ondelete="SET NULL"), nullable=True),
        sa.Column("grouping", sa.String(16), nullable=False),
        sa.Column("group_name", sa.String(512), nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("detected_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("start", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(c, sa.Double(), nullable=False) for c in ("before", "before_low", "before_high",
                                                                  "after", "after_low", "after_high")),
        sa.Column("evidence", sa.Double(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("CURRENT_TIMESTAMP"),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_quality_change"),
    )
    op.create_index("ix_quality_change_series", "quality_change", ["dataset_id", "grouping", "detected_at"])


def downgrade() -> None:
    op.drop_index("ix_quality_change_series", table_name="quality_change")
    op.drop_table("quality_change")
    op.drop_index("ix_quality_window_series", table_name="quality_window")
    op.drop_table("quality_window")
    op.drop_table("quality_state")
    op.drop_index("ix_annotation_data_version", table_name="annotation")
    with op.batch_alter_table("dataset") as batch:
        batch.drop_column("quality_window")
