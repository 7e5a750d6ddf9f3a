"""Enqueueing audits from the write path (the web app, the CLI, ingestion).

The database already records that a dataset needs an audit (its bumped
``data_version`` and an outbox row, written with the data); the message only makes
it happen sooner. So publishing never raises: with the broker down the write still
succeeds, and the periodic sweep enqueues the audit once the broker is back.
"""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.orm import Session

__all__ = ["request_audit", "request_audit_after_commit"]


def request_audit(dataset_id: int) -> str | None:
    """Enqueue an audit of ``dataset_id``; call after the write committed.

    Returns the task id, or None when the broker could not be reached, now or in the last
    :data:`auditor.worker.tasks.BROKER_DOWN_SECONDS` (logged); never raises.
    """
    from auditor.worker.tasks import enqueue_audit

    return enqueue_audit(dataset_id)


def request_audit_after_commit(session: Session, dataset_id: int) -> None:
    """Call :func:`request_audit` once ``session``'s current transaction commits."""

    def _enqueue(_session: Session) -> None:
        request_audit(dataset_id)

    event.listen(session, "after_commit", _enqueue, once=True)
