"""Each certification stores the first audit run of its release's current unbroken run of
certified verdicts on the dataset, so that "certified since" is one lookup rather than a
scan of the release's history; existing rows are filled in from that history.

Revision ID: 5c1e9a7d3b20
Revises: 2f8c4d6a9e01
Create Date: 2026-11-27 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5c1e9a7d3b20"
down_revision: str | Sequence[str] | None = "2f8c4d6a9e01"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 5_000


def upgrade() -> None:
    op.add_column("certification", sa.Column("certified_since_run_id", sa.Integer(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.text(
        "SELECT c.id, c.release_id, a.dataset_id, c.audit_run_id, c.certified FROM certification c "
        "JOIN audit_run a ON a.id = c.audit_run_id ORDER BY c.release_id, a.dataset_id, c.audit_run_id"))
    key, since, updates = None, None, []
    update = sa.text("UPDATE certification SET certified_since_run_id = :since WHERE id = :id")
    for cert_id, release_id, dataset_id, run_id, certified in rows:
        if (release_id, dataset_id) != key:
            key, since = (release_id, dataset_id), None
        if not certified:
            since = None
            continue
        since = run_id if since is None else since
        updates.append({"id": cert_id, "since": since})
    for start in range(0, len(updates), _BATCH):
        conn.execute(update, updates[start:start + _BATCH])


def downgrade() -> None:
    with op.batch_alter_table("certification") as batch:
        batch.drop_column("certified_since_run_id")
