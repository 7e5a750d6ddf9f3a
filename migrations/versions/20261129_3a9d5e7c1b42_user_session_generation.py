"""A session generation per user: a session cookie is honoured only while its user's
generation is the one it was issued at, and logout, deactivation and a new password bump
it (a cookie captured before a logout read pages and the API after it).

Revision ID: 3a9d5e7c1b42
Revises: 3a7c5e1f9b42
Create Date: 2026-11-28 18:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3a9d5e7c1b42"
down_revision: str | Sequence[str] | None = "3a7c5e1f9b42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("users", sa.Column("session_generation", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("session_generation")
