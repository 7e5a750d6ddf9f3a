"""Label Studio connector: a project feeding a dataset by webhooks and a pull sync, the last
known state of each of its annotations, its users, its events; and the kind of change
(re-label or deletion) of each annotation history row.

Revision ID: 0999c713fc8b
Revises: b7d3e1a4c6f2
Create Date: 2026-11-25 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0999c713fc8b"
down_revision: str | Sequence[str] | None = "b7d3e1a4c6f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_EXTERNAL_ID = sa.String(512).with_variant(sa.String(512, collation="C"), "postgresql")
_EVENT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _connector_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["connector_id"], ["labelstudio_connector.id"],
                                   name=f"fk_{table}_connector_id_labelstudio_connector", ondelete="CASCADE")


def upgrade() -> None:
    with op.batch_alter_table("annotation_history", schema=None) as batch_op:
        batch_op.add_column(sa.Column("change", sa.String(8), server_default="relabel", nullable=False))

    op.create_table(
        "labelstudio_connector",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workspace_id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(1000), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("annotator_namespace", sa.String(200), server_default="", nullable=False),
        sa.Column("item_field", sa.String(200), server_default="item_id", nullable=False),
        sa.Column("from_name", sa.String(200), nullable=True),
        sa.Column("label_map", _JSON, nullable=True),
        sa.Column("vendor_map", _JSON, nullable=True),
        sa.Column("webhook_secret_hash", sa.String(64), nullable=False),
        sa.Column("token_encrypted", sa.Text(), nullable=True),
        sa.Column("token_env", sa.String(200), nullable=True),
        sa.Column("enabled", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("last_event_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_sync_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_sync_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspace.id"],
                                name="fk_labelstudio_connector_workspace_id_workspace", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["dataset_id"], ["dataset.id"],
                                name="fk_labelstudio_connector_dataset_id_dataset", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_labelstudio_connector"),
        sa.UniqueConstraint("dataset_id", "url", "project_id",
                            name="uq_labelstudio_connector_dataset_id_url_project_id"),
    )
    with op.batch_alter_table("labelstudio_connector", schema=None) as batch_op:
        batch_op.create_index("ix_labelstudio_connector_workspace_id", ["workspace_id"], unique=False)
        batch_op.create_index("ix_labelstudio_connector_dataset_id", ["dataset_id"], unique=False)

    op.create_table(
        "labelstudio_annotation",
        sa.Column("connector_id", sa.Integer(), nullable=False),
        sa.Column("ls_id", sa.BigInteger(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.BigInteger(), nullable=True),
        sa.Column("item_ext", _EXTERNAL_ID, nullable=True),
        sa.Column("ls_user_id", sa.BigInteger(), nullable=True),
        sa.Column("annotator_ext", _EXTERNAL_ID, nullable=True),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=True),
        sa.Column("ls_updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("event_id", sa.BigInteger(), nullable=False),
        sa.Column("batch_id", sa.BigInteger(), nullable=True),
        _connector_fk("labelstudio_annotation"),
        sa.PrimaryKeyConstraint("connector_id", "ls_id", name="pk_labelstudio_annotation"),
    )
    with op.batch_alter_table("labelstudio_annotation", schema=None) as batch_op:
        batch_op.create_index("ix_labelstudio_annotation_dataset_id_item_ext_annotator_ext",
                              ["dataset_id", "item_ext", "annotator_ext"], unique=False)
        batch_op.create_index("ix_labelstudio_annotation_connector_id_task_id", ["connector_id", "task_id"],
                              unique=False)

    op.create_table(
        "labelstudio_user",
        sa.Column("connector_id", sa.Integer(), nullable=False),
        sa.Column("ls_user_id", sa.BigInteger(), nullable=False),
        sa.Column("email", sa.String(320), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        _connector_fk("labelstudio_user"),
        sa.PrimaryKeyConstraint("connector_id", "ls_user_id", name="pk_labelstudio_user"),
    )

    op.create_table(
        "labelstudio_event",
        sa.Column("id", _EVENT_ID, nullable=False),
        sa.Column("connector_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("counts", _JSON, nullable=True),
        sa.Column("batch_id", sa.BigInteger(), nullable=True),
        sa.Column("data_version", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        _connector_fk("labelstudio_event"),
        sa.PrimaryKeyConstraint("id", name="pk_labelstudio_event"),
    )
    with op.batch_alter_table("labelstudio_event", schema=None) as batch_op:
        batch_op.create_index("ix_labelstudio_event_connector_id_created_at", ["connector_id", "created_at"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("labelstudio_event", schema=None) as batch_op:
        batch_op.drop_index("ix_labelstudio_event_connector_id_created_at")
    op.drop_table("labelstudio_event")
    op.drop_table("labelstudio_user")
    with op.batch_alter_table("labelstudio_annotation", schema=None) as batch_op:
        batch_op.drop_index("ix_labelstudio_annotation_connector_id_task_id")
        batch_op.drop_index("ix_labelstudio_annotation_dataset_id_item_ext_annotator_ext")
    op.drop_table("labelstudio_annotation")
    with op.batch_alter_table("labelstudio_connector", schema=None) as batch_op:
        batch_op.drop_index("ix_labelstudio_connector_dataset_id")
        batch_op.drop_index("ix_labelstudio_connector_workspace_id")
    op.drop_table("labelstudio_connector")
    with op.batch_alter_table("annotation_history", schema=None) as batch_op:
        batch_op.drop_column("change")
