"""Label Studio feeds: annotations the pull kept aside (``labelstudio_quarantine``) and
the count of webhook deliveries refused per connector.

Revision ID: 6b2e8d4f1c37
Revises: 5c2e8a4f7d13
Create Date: 2026-11-29 21:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6b2e8d4f1c37"
down_revision: str | Sequence[str] | None = "5c2e8a4f7d13"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("labelstudio_connector",
                  sa.Column("webhook_refused", sa.Integer(), server_default="0", nullable=False))
    op.add_column("labelstudio_connector", sa.Column("last_refused_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("labelstudio_connector", sa.Column("last_refusal", sa.Text(), nullable=True))
    op.add_column("labelstudio_connector",
                  sa.Column("quarantined", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "labelstudio_quarantine",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("connector_id", sa.Integer(), nullable=False),
        sa.Column("ls_id", sa.BigInteger(), nullable=True),
        sa.Column("task_id", sa.BigInteger(), nullable=True),
        sa.Column("field", sa.String(length=300), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("hint", sa.Text(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(["connector_id"], ["labelstudio_connector.id"], ondelete="CASCADE",
                                name="fk_labelstudio_quarantine_connector_id_labelstudio_connector"),
        sa.PrimaryKeyConstraint("id", name="pk_labelstudio_quarantine"),
    )
    op.create_index("ix_labelstudio_quarantine_connector_id_ls_id", "labelstudio_quarantine",
                    ["connector_id", "ls_id"])


def downgrade() -> None:
    op.drop_index("ix_labelstudio_quarantine_connector_id_ls_id", table_name="labelstudio_quarantine")
    op.drop_table("labelstudio_quarantine")
    with op.batch_alter_table("labelstudio_connector") as batch:
        batch.drop_column("quarantined")
        batch.drop_column("last_refusal")
        batch.drop_column("last_refused_at")
        batch.drop_column("webhook_refused")
