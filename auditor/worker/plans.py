"""Celery tasks that compute releases' audit plans (:mod:`auditor.audit.plans`) off the request path.

``plan_release(release_id, dataset_id)`` reads the dataset's snapshot in a read-only
transaction, plans, and writes the release's ``release_plan`` row in a second one.
:func:`request_plan` publishes it and never raises (as :func:`~auditor.worker.dispatch.request_audit`):
with the broker down the row stays ``pending`` and the next request asks again.

After each audit, :func:`request_after_audit` asks for the plans of the releases it did not
certify (``AUDITOR_PLANS_PER_AUDIT`` of them, the most recently released first), so the
overview can say what to label next without anyone opening a release first; one
``plan_releases`` task plans them all from one snapshot.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from auditor.alerting.settings import audit_options
from auditor.audit import plans
from auditor.audit.pipeline import AuditOptions
from auditor.audit.snapshot import load_audit_snapshot
from auditor.db.session import session_scope
from auditor.worker.context import session_factory, worker_settings

__all__ = ["plan_release", "plan_releases", "request_after_audit", "request_plan"]

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


def request_after_audit(factory: sessionmaker[Session], run_id: int, limit: int) -> list[int]:
    """Ask for the plans of up to ``limit`` releases the audit ``run_id`` did not certify; returns
    the ids of those a worker was asked to plan. A plan already current or pending is left
    alone (:func:`auditor.audit.plans.request`); each ``pending`` row is committed before the
    one message for all of them is published."""
    with session_scope(factory) as session:
        dataset_id, release_ids = plans.uncertified_releases(session, run_id, limit)
    asked = []
    for release_id in release_ids:
        with factory() as session:
            _row, ask = plans.request(session, release_id, dataset_id)
            if not ask:
                continue
            try:
                session.commit()
            except IntegrityError:  # a page asked for it at the same moment (and asks a worker)
                session.rollback()
                continue
        asked.append(release_id)
    if asked:
        try:
            plan_releases.apply_async((int(dataset_id), asked), retry=False, ignore_result=True)
        except Exception as exc:  # any broker failure: the rows stay pending, the next view asks again
            log.warning("could not enqueue the plans of releases %s on dataset %s (%s: %s)", asked, dataset_id,
                        exc.__class__.__name__, exc)
            return []
    return asked


MAX_DEFERRALS = 3
"""How many times a plan task steps aside for its dataset's due audit before it plans anyway."""


def _audit_due(factory: sessionmaker[Session], dataset_id: int) -> bool:
    """The dataset has data newer than its last succeeded audit: an audit of it is due."""
    from sqlalchemy import func, select

    from auditor.db.models import AuditRun, AuditStatus, Dataset

    with session_scope(factory) as session:
        version = session.scalar(select(Dataset.data_version).where(Dataset.id == dataset_id))
        done = session.scalar(select(func.max(AuditRun.data_version)).where(
            AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.SUCCEEDED))
    return version is not None and done is not None and version > done


def _plan(task, dataset_id: int, release_ids: list[int], deferred: int = 0) -> list[dict[str, Any]]:
    """Plan the releases on the dataset from one snapshot; each plan is stored in its own transaction.

    Audits first, also against the plan in hand: before the snapshot is read and before
    each release, if new data made an audit of the dataset due, the releases not yet
    planned go back to the queue (behind the audit, which the worker serves first) and
    this task ends, at most :data:`MAX_DEFERRALS` times per plan. One worker process then
    makes an audit wait for one release's plan at most, not for a whole ``plan_releases``."""
    factory = session_factory(task)

    def step_aside(rest: list[int]) -> list[dict[str, Any]] | None:
        """The releases ``rest`` back to the queue when an audit of the dataset is due; None if not."""
        if deferred >= MAX_DEFERRALS or not _audit_due(factory, dataset_id):
            return None
        try:
            plan_releases.apply_async((int(dataset_id), rest), {"deferred": deferred + 1}, retry=False,
                                      ignore_result=True)
        except Exception as exc:  # any broker failure: plan now rather than drop them
            log.warning("could not put back the plans of releases %s (%s)", rest, exc.__class__.__name__)
            return None
        return [{"release_id": r, "dataset_id": dataset_id, "status": "deferred", "error": None} for r in rest]

    aside = step_aside(release_ids)  # before the snapshot is read, too
    if aside is not None:
        return aside
    with session_scope(factory) as session:  # (the snapshot reads in a transaction of its own)
        options = audit_options(session, dataset_id, AuditOptions.from_settings(worker_settings(task)))
    with factory() as session:
        snap = load_audit_snapshot(session, dataset_id)
        session.rollback()
    out = []
    for k, release_id in enumerate(release_ids):
        aside = step_aside(release_ids[k:]) if k else None
        if aside is not None:
            out += aside
            break
        with session_scope(factory) as session:
            row = plans.run(session, snap, release_id, options)
            out.append({"release_id": release_id, "dataset_id": dataset_id, "status": row.status,
                        "error": row.error})
    return out


@shared_task(bind=True, name="workers.tasks.plan_release")
def plan_release(self, release_id: int, dataset_id: int, deferred: int = 0) -> dict[str, Any]:
    """Plan one release on one dataset and store the plan; returns its status."""
    return _plan(self, dataset_id, [release_id], deferred)[0]


@shared_task(bind=True, name="workers.tasks.plan_releases")
def plan_releases(self, dataset_id: int, release_ids: list[int], deferred: int = 0) -> list[dict[str, Any]]:
    """Plan several releases on one dataset (after an audit) from one snapshot; returns their statuses."""
    return _plan(self, dataset_id, [int(r) for r in release_ids], deferred)
