"""Outgoing webhooks per workspace (signed, retried) and their delivery log.

Revision ID: de28d90a1bf2
Revises: 4c7e2a9b5d10
Create Date: 2026-11-25 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "de28d90a1bf2"
down_revision: str | Sequence[str] | None = "4c7e2a9b5d10"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _created() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def upgrade() -> None:
    op.create_table(
        "webhook",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("description", sa.String(length=200), server_default="", nullable=False),
        sa.Column("secret", sa.String(length=200), nullable=False),
        sa.Column("secret_prefix", sa.String(length=16), nullable=False),
        sa.Column("events", _JSON, nullable=False),
        sa.Column("active", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        _created(),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspace.id"], name="fk_webhook_workspace_id_workspace",
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["created_by_id"], ["users.id"], name="fk_webhook_created_by_id_users",
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook"),
    )
    op.create_index("ix_webhook_workspace_id", "webhook", ["workspace_id"])
    op.create_table(
        "webhook_delivery",
        sa.Column("id", _BIGID, nullable=False),
        sa.Column("webhook_id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=50), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.Enum("pending", "succeeded", "failed", name="delivery_status", native_enum=False,
                                    create_constraint=True, length=24), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("response_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("history", _JSON, nullable=True),
        _created(),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["webhook_id"], ["webhook.id"], name="fk_webhook_delivery_webhook_id_webhook",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_delivery"),
    )
    op.create_index("ix_webhook_delivery_webhook_id_created_at", "webhook_delivery", ["webhook_id", "created_at"])
    op.create_index("ix_webhook_delivery_status_next_attempt_at", "webhook_delivery", ["status", "next_attempt_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_delivery_status_next_attempt_at", table_name="webhook_delivery")
    op.drop_index("ix_webhook_delivery_webhook_id_created_at", table_name="webhook_delivery")
    op.drop_table("webhook_delivery")
    op.drop_index("ix_webhook_workspace_id", table_name="webhook")
    op.drop_table("webhook")
