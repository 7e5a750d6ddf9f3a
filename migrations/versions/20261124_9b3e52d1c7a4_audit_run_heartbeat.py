"""audit_run.heartbeat_at: the running audit's worker renews it while it works.

A run is live while its heartbeat is younger than the lease (about a minute), not for
the whole hard time limit: a run whose worker was killed outright is taken over within
a couple of sweep periods. NULL (runs claimed before this column) falls back to
``started_at``.

Revision ID: 9b3e52d1c7a4
Revises: 5d2a7c90e1b3
Create Date: 2026-11-24 06:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9b3e52d1c7a4"
down_revision: str | Sequence[str] | None = "5d2a7c90e1b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_run") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_run") as batch:
        batch.drop_column("heartbeat_at")
