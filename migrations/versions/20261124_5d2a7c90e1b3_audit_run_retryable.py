"""audit_run.retryable: whether a failed audit may succeed if tried again.

A failure the same data will always reproduce (a bug, data the statistics cannot take)
is recorded once with its cause and is not retried for that data version; a transient
one (the database went away, a lock timed out) is retried with backoff. NULL for runs
recorded before this column (treated as retryable, as they were).

Revision ID: 5d2a7c90e1b3
Revises: 8e911a54a1cb
Create Date: 2026-11-24 01:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5d2a7c90e1b3"
down_revision: str | Sequence[str] | None = "8e911a54a1cb"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_run") as batch:
        batch.add_column(sa.Column("retryable", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audit_run") as batch:
        batch.drop_column("retryable")
