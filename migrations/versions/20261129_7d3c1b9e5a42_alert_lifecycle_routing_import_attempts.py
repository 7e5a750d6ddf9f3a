"""Alerts that reach people and that people act on; rejected imports kept in short.

- ``alert``: who it is assigned to (and since when), until when it is snoozed, and
  ``updated_at`` (moves with every lifecycle step); ``alert_event``: each step in order
  (acknowledged, reopened, assigned, unassigned, snoozed, unsnoozed, a comment).
- ``alert_channel`` (an email list or a Slack-compatible incoming webhook), ``alert_rule``
  (kinds, severities and datasets) and ``alert_rule_channel`` (where a rule sends).
- ``webhook_delivery`` also carries the deliveries to alert channels: ``channel_id``, and
  ``webhook_id`` nullable, exactly one of the two set.
- ``workspace_setting``: a workspace's own value of a threshold whose default is the
  environment's, and who set it when.
- ``import_attempt``: a rejected upload (who, when, format, its first errors; never its rows).

Revision ID: 7d3c1b9e5a42
Revises: 8e4b2d7f1a63
Create Date: 2026-11-29 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "7d3c1b9e5a42"
down_revision: str | Sequence[str] | None = "8e4b2d7f1a63"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _created(name: str = "created_at") -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False)


def _fk(table: str, column: str, target: str, ondelete: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint([column], [f"{target}.id"], name=f"fk_{table}_{column}_{target}", ondelete=ondelete)


def upgrade() -> None:
    op.create_table(
        "alert_channel",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Enum("email", "slack", name="channel_kind", native_enum=False, create_constraint=True,
                                  length=24), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("recipients", _JSON, nullable=True),
        sa.Column("url", sa.String(length=2000), nullable=True),
        sa.Column("active", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        _created(),
        _fk("alert_channel", "created_by_id", "users", "SET NULL"),
        _fk("alert_channel", "workspace_id", "workspace", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_channel"),
    )
    op.create_index("ix_alert_channel_workspace_id", "alert_channel", ["workspace_id"])
    op.create_table(
        "alert_rule",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kinds", _JSON, nullable=False),
        sa.Column("severities", _JSON, nullable=False),
        sa.Column("dataset_ids", _JSON, nullable=False),
        sa.Column("active", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        _created(),
        _created("updated_at"),
        _fk("alert_rule", "created_by_id", "users", "SET NULL"),
        _fk("alert_rule", "workspace_id", "workspace", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_rule"),
    )
    op.create_index("ix_alert_rule_workspace_id", "alert_rule", ["workspace_id"])
    op.create_table(
        "alert_rule_channel",
        sa.Column("rule_id", sa.Integer(), nullable=False),
        sa.Column("channel_id", sa.Integer(), nullable=False),
        _fk("alert_rule_channel", "channel_id", "alert_channel", "CASCADE"),
        _fk("alert_rule_channel", "rule_id", "alert_rule", "CASCADE"),
        sa.PrimaryKeyConstraint("rule_id", "channel_id", name="pk_alert_rule_channel"),
    )
    op.create_index("ix_alert_rule_channel_channel_id", "alert_rule_channel", ["channel_id"])
    op.create_table(
        "import_attempt",
        sa.Column("id", _BIGID, nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("format", sa.String(length=32), nullable=True),
        sa.Column("source_name", sa.String(length=1024), nullable=True),
        sa.Column("submitted_by_id", sa.Integer(), nullable=True),
        sa.Column("submitted_by", sa.String(length=320), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("bad_rows", sa.Integer(), server_default="0", nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("errors", _JSON, nullable=True),
        _created(),
        _fk("import_attempt", "dataset_id", "dataset", "CASCADE"),
        _fk("import_attempt", "submitted_by_id", "users", "SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_import_attempt"),
    )
    op.create_index("ix_import_attempt_dataset_id_created_at", "import_attempt", ["dataset_id", "created_at"])
    op.create_index("ix_import_attempt_submitted_by_id", "import_attempt", ["submitted_by_id"])
    op.create_table(
        "workspace_setting",
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", _JSON, nullable=False),
        sa.Column("updated_by_id", sa.Integer(), nullable=True),
        sa.Column("updated_by", sa.String(length=320), nullable=False),
        _created("updated_at"),
        _fk("workspace_setting", "updated_by_id", "users", "SET NULL"),
        _fk("workspace_setting", "workspace_id", "workspace", "CASCADE"),
        sa.PrimaryKeyConstraint("workspace_id", "name", name="pk_workspace_setting"),
    )
    op.create_table(
        "alert_event",
        sa.Column("id", _BIGID, nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("actor", sa.String(length=320), nullable=False),
        sa.Column("assignee_id", sa.Integer(), nullable=True),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("body", sa.Text(), nullable=True),
        _created(),
        _fk("alert_event", "actor_id", "users", "SET NULL"),
        _fk("alert_event", "alert_id", "alert", "CASCADE"),
        _fk("alert_event", "assignee_id", "users", "SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_event"),
    )
    op.create_index("ix_alert_event_alert_id_created_at", "alert_event", ["alert_id", "created_at"])
    with op.batch_alter_table("alert") as batch:
        batch.add_column(sa.Column("assigned_to_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("assigned_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("snoozed_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(_created("updated_at"))
        batch.create_index("ix_alert_assigned_to_id", ["assigned_to_id"])
        batch.create_foreign_key("fk_alert_assigned_to_id_users", "users", ["assigned_to_id"], ["id"],
                                 ondelete="SET NULL")
    with op.batch_alter_table("webhook_delivery") as batch:
        batch.add_column(sa.Column("channel_id", sa.Integer(), nullable=True))
        batch.alter_column("webhook_id", existing_type=sa.Integer(), nullable=True)
        batch.create_index("ix_webhook_delivery_channel_id_created_at", ["channel_id", "created_at"])
        batch.create_foreign_key("fk_webhook_delivery_channel_id_alert_channel", "alert_channel", ["channel_id"],
                                 ["id"], ondelete="CASCADE")
        batch.create_check_constraint(op.f("ck_webhook_delivery_one_target"),
                                      "(webhook_id IS NULL) <> (channel_id IS NULL)")


def downgrade() -> None:
    # The channels' deliveries have no webhook: they go with the channels.
    op.execute("DELETE FROM webhook_delivery WHERE webhook_id IS NULL")
    with op.batch_alter_table("webhook_delivery") as batch:
        batch.drop_constraint(op.f("ck_webhook_delivery_one_target"), type_="check")
        batch.drop_constraint("fk_webhook_delivery_channel_id_alert_channel", type_="foreignkey")
        batch.drop_index("ix_webhook_delivery_channel_id_created_at")
        batch.alter_column("webhook_id", existing_type=sa.Integer(), nullable=False)
        batch.drop_column("channel_id")
    with op.batch_alter_table("alert") as batch:
        batch.drop_constraint("fk_alert_assigned_to_id_users", type_="foreignkey")
        batch.drop_index("ix_alert_assigned_to_id")
        batch.drop_column("updated_at")
        batch.drop_column("snoozed_until")
        batch.drop_column("assigned_at")
        batch.drop_column("assigned_to_id")
    op.drop_index("ix_alert_event_alert_id_created_at", table_name="alert_event")
    op.drop_table("alert_event")
    op.drop_table("workspace_setting")
    op.drop_index("ix_import_attempt_submitted_by_id", table_name="import_attempt")
    op.drop_index("ix_import_attempt_dataset_id_created_at", table_name="import_attempt")
    op.drop_table("import_attempt")
    op.drop_index("ix_alert_rule_channel_channel_id", table_name="alert_rule_channel")
    op.drop_table("alert_rule_channel")
    op.drop_index("ix_alert_rule_workspace_id", table_name="alert_rule")
    op.drop_table("alert_rule")
    op.drop_index("ix_alert_channel_workspace_id", table_name="alert_channel")
    op.drop_table("alert_channel")
