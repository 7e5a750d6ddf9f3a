"""Enqueueing audits from the write path (the web app, the CLI, ingestion).

The database already records that a dataset needs an audit (its bumped
``data_version`` and an outbox row, written with the data); the message only makes
it happen sooner. So publishing never raises: with the broker down the write still
succeeds, and the periodic sweep enqueues the audit once the broker is back.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import event
from sqlalchemy.orm import Session

__all__ = ["request_audit", "request_audit_after_commit"]

log = logging.getLogger(__name__)


#: After the broker could not be reached, this process does not try again for this many
#: seconds: every write meanwhile would wait for the connection to fail (about 2 s each
#: with Redis down), and the sweep enqueues their audits once the broker is back.
BROKER_DOWN_SECONDS = 15.0
_broker_down_until: dict[str, float] = {}  # broker URL → until when it is not tried


def request_audit(dataset_id: int) -> str | None:
    """Enqueue an audit of ``dataset_id``; call after the write committed.

    Returns the task id, or None when the broker could not be reached, now or in the last
    :data:`BROKER_DOWN_SECONDS` (logged).
    """
    from auditor.worker.tasks import audit_dataset

    broker = str(audit_dataset.app.conf.broker_url)
    if time.monotonic() < _broker_down_until.get(broker, 0.0):
        log.info("the broker was unreachable moments ago: the audit of dataset %s is left to the sweep", dataset_id)
        return None
    try:
        # One connection attempt and no publish retries: a web request must not hang on a
        # dead broker (kombu's default retries took 2 s to give up on a refused connection).
        with audit_dataset.app.pool.acquire(block=True, timeout=1.0) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=1.0)
            # The request's time goes with the message: the run it leads to counts its queued
            # time from here (``queued_seconds``), not from when a worker took it.
            result = audit_dataset.apply_async((int(dataset_id),), {"requested_at": time.time()}, retry=False,
                                               ignore_result=True, connection=conn)
    except Exception as exc:  # any broker failure: the sweep catches up
        _broker_down_until[broker] = time.monotonic() + BROKER_DOWN_SECONDS
        log.warning("could not enqueue the audit of dataset %s (%s: %s); the sweep will",
                    dataset_id, exc.__class__.__name__, exc)
        return None
    return result.id


def request_audit_after_commit(session: Session, dataset_id: int) -> None:
    """Call :func:`request_audit` once ``session``'s current transaction commits."""

    def _enqueue(_session: Session) -> None:
        request_audit(dataset_id)

    event.listen(session, "after_commit", _enqueue, once=True)
