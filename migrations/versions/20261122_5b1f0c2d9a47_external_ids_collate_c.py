"""External ids of items and annotators compare byte-wise (COLLATE "C") on PostgreSQL.

A linguistic collation made every unique-index insertion of an imported id call
strcoll. SQLite compares bytes already, so it has nothing to change.

Revision ID: 5b1f0c2d9a47
Revises: 3837cb14512e
Create Date: 2026-11-22 08:20:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "5b1f0c2d9a47"
down_revision: str | Sequence[str] | None = "3837cb14512e"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (("item", "external_id"), ("annotator", "external_id"))


def _collate(collation: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.execute(f'ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR(512) COLLATE "{collation}"')


def upgrade() -> None:
    _collate("C")


def downgrade() -> None:
    _collate("default")
