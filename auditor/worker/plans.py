"""Celery task that computes a release's audit plan (:mod:`auditor.audit.plans`) off the request path.

``plan_release(release_id, dataset_id)`` reads the dataset's snapshot in a read-only
transaction, plans, and writes the release's ``release_plan`` row in a second one.
:func:`request_plan` publishes it and never raises (as :func:`~auditor.worker.dispatch.request_audit`):
with the broker down the row stays ``pending`` and the next request asks again.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from auditor.audit import plans
from auditor.audit.pipeline import AuditOptions
from auditor.db.session import session_scope
from auditor.db.snapshot import load_audit_snapshot

__all__ = ["plan_release", "request_plan"]

log = logging.getLogger(__name__)


def request_plan(release_id: int, dataset_id: int) -> str | None:
    """Enqueue :func:`plan_release`; call after the ``pending`` row committed."""
    try:
        result = plan_release.apply_async((int(release_id), int(dataset_id)), retry=False, ignore_result=True)
    except Exception as exc:  # any broker failure: the next request asks again
        log.warning("could not enqueue the plan of release %s on dataset %s (%s: %s)", release_id, dataset_id,
                    exc.__class__.__name__, exc)
        return None
    return result.id


@shared_task(bind=True, name="workers.tasks.plan_release")
def plan_release(self, release_id: int, dataset_id: int) -> dict[str, Any]:
    """Plan one release on one dataset and store the plan; returns its status."""
    from auditor.worker.tasks import _session_factory, _worker_settings

    factory = _session_factory(self)
    options = AuditOptions.from_settings(_worker_settings(self))
    with factory() as session:
        snap = load_audit_snapshot(session, dataset_id)
        session.rollback()
    with session_scope(factory) as session:
        row = plans.run(session, snap, release_id, options)
        status, error = row.status, row.error
    return {"release_id": release_id, "dataset_id": dataset_id, "status": status, "error": error}
