"""Certification: the anytime confidence and both verdicts (paper's and anytime).

``s_anytime_t`` / ``s_anytime_e`` hold the anytime confidence with U_t and U_e;
``certified_paper`` / ``certified_anytime`` the two verdicts; ``method`` which one the
badge (``certified``, ``verdict``) used. Rows written before this revision used the
paper's OMS: ``method`` defaults to ``oms`` for them.

Revision ID: f1b4c9d19117
Revises: c3f1d8a2b6e4
Create Date: 2026-11-24 00:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f1b4c9d19117"
down_revision: str | Sequence[str] | None = "c3f1d8a2b6e4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("certification") as batch:
        batch.add_column(sa.Column("s_anytime_t", sa.Double(), nullable=True))
        batch.add_column(sa.Column("s_anytime_e", sa.Double(), nullable=True))
        batch.add_column(sa.Column("certified_paper", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("certified_anytime", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("method", sa.String(length=16), nullable=False, server_default="oms"))


def downgrade() -> None:
    with op.batch_alter_table("certification") as batch:
        for name in ("method", "certified_anytime", "certified_paper", "s_anytime_e", "s_anytime_t"):
            batch.drop_column(name)
