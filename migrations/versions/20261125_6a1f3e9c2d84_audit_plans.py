"""Audit plans: a price per label per vendor, and each release's latest plan.

Revision ID: 6a1f3e9c2d84
Revises: 0999c713fc8b
Create Date: 2026-11-25 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "6a1f3e9c2d84"
down_revision: str | Sequence[str] | None = "0999c713fc8b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "vendor_price",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("vendor", sa.String(length=200), nullable=False),
        sa.Column("price_per_label", sa.Double(), nullable=False),
        sa.Column("currency", sa.String(length=8), server_default="USD", nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.CheckConstraint("price_per_label >= 0", name="ck_vendor_price_price_not_negative"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspace.id"], name="fk_vendor_price_workspace_id_workspace",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_vendor_price"),
        sa.UniqueConstraint("workspace_id", "vendor", name="uq_vendor_price_workspace_id_vendor"),
    )
    op.create_table(
        "release_plan",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("release_id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("audit_run_id", sa.Integer(), nullable=True),
        sa.Column("data_version", sa.BigInteger(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("plan", _JSON, nullable=True),
        sa.Column("relabel", _JSON, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["release_id"], ["release.id"], name="fk_release_plan_release_id_release",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["dataset_id"], ["dataset.id"], name="fk_release_plan_dataset_id_dataset",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["audit_run_id"], ["audit_run.id"], name="fk_release_plan_audit_run_id_audit_run",
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_release_plan"),
        sa.UniqueConstraint("release_id", "dataset_id", name="uq_release_plan_release_id_dataset_id"),
    )
    op.create_index("ix_release_plan_dataset_id", "release_plan", ["dataset_id"])
    op.create_index("ix_release_plan_audit_run_id", "release_plan", ["audit_run_id"])


def downgrade() -> None:
    op.drop_index("ix_release_plan_audit_run_id", table_name="release_plan")
    op.drop_index("ix_release_plan_dataset_id", table_name="release_plan")
    op.drop_table("release_plan")
    op.drop_table("vendor_price")
