"""Ask a worker for a release's audit plan: from the release page's button and
``POST /api/v1/releases/{id}/plan`` (the workers also ask after each audit)."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from auditor.audit import plans

__all__ = ["request_plan"]


def request_plan(db: Session, release_id: int, dataset_id: int) -> bool:
    """Ask a worker for the plan when it is missing or older than the latest audit (one row
    write, committed, and one message; no computing here). Whether a worker was asked: not
    when the stored plan is current, one is on its way, or a concurrent first request stored
    the pending row first (that request asks)."""
    _, ask = plans.request(db, release_id, dataset_id)
    if ask:
        try:
            db.commit()
        except IntegrityError:
            db.rollback()
            ask = False
    if ask:
        from auditor.worker.plans import request_plan as send

        send(release_id, dataset_id)
    return ask
