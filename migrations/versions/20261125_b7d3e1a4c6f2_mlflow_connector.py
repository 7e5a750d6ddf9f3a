"""MLflow model registry connector: which registered model feeds a dataset's releases and
receives its verdicts as model version tags.

Revision ID: b7d3e1a4c6f2
Revises: de28d90a1bf2
Create Date: 2026-11-25 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "b7d3e1a4c6f2"
down_revision: str | Sequence[str] | None = "de28d90a1bf2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "mlflow_connector",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), sa.ForeignKey("dataset.id", name="fk_mlflow_connector_dataset_id_dataset",
                                                            ondelete="CASCADE"), nullable=False),
        sa.Column("tracking_uri", sa.String(1000), nullable=False),
        sa.Column("registered_model", sa.String(500), nullable=False),
        sa.Column("model_name", sa.String(200), nullable=False),
        sa.Column("artifact_path", sa.String(1000), nullable=False),
        sa.Column("artifact_root", sa.String(8), nullable=False, server_default="run"),
        sa.Column("tag_prefix", sa.String(64), nullable=False, server_default="auditor."),
        sa.Column("field_map", _JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.Column("last_written_run_id", sa.Integer(), nullable=True),
        sa.Column("last_written_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_mlflow_connector"),
        sa.UniqueConstraint("dataset_id", "tracking_uri", "registered_model",
                            name="uq_mlflow_connector_dataset_id_tracking_uri_registered_model"),
    )


def downgrade() -> None:
    op.drop_table("mlflow_connector")
