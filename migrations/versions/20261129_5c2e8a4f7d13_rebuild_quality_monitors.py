"""The quality monitors become paired CUSUMs (issue 34): a monitor stored by the earlier
detector holds no paired sums, so every stored state is marked stale and the dataset's
next audit rebuilds its monitors from every annotation (changes already reported are not
raised again).

Revision ID: 5c2e8a4f7d13
Revises: 3a9d5e7c1b42
Create Date: 2026-11-28 22:45:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "5c2e8a4f7d13"
down_revision: str | Sequence[str] | None = "3a9d5e7c1b42"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: auditor.audit.quality.STALE, spelled out: a migration must not change with the code.
_STALE = -1


def upgrade() -> None:
    op.execute(f"UPDATE quality_state SET data_version = {_STALE}")


def downgrade() -> None:
    # The earlier detector knows no stale mark and cannot read a paired state: without a
    # stored state it starts from every annotation at the next audit.
    op.execute("DELETE FROM quality_state")
