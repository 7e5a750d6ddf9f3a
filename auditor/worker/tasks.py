"""Celery tasks: thin wrappers around :mod:`auditor.audit.runner`. They take ids, never objects.

``audit_dataset(dataset_id)`` claims the dataset's one running audit (or returns at once
when another run is live, or when the last audit is current), loads a snapshot,
computes, and writes all results in one transaction. Large datasets fan the per-release
work out as a Celery group, started before the dataset-wide part so both run at once;
``finish_audit`` waits for the group by rescheduling itself and does the write. A run that
saw data arrive while it computed enqueues exactly one follow-up. ``sweep`` (Celery
beat) enqueues every dataset whose data is newer than its last succeeded audit, and
every webhook delivery whose message was lost. ``deliver_webhook(delivery_id)`` sends one
outgoing webhook delivery (:mod:`auditor.webhooks`), retrying with backoff.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from datetime import timedelta
from typing import Any

from billiard.exceptions import WorkerLostError
from celery import group, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from celery.result import GroupResult
from sqlalchemy import exc as sa_exc

from auditor import webhooks
from auditor.alerting import channels
from auditor.alerting.routing import route_alerts
from auditor.audit import runner
from auditor.audit.pipeline import (
    AuditOptions,
    dataset_part,
    merge_parts,
    release_part,
    release_payload,
    upper_summary,
)
from auditor.audit.store import heartbeat_audit, stale_datasets
from auditor.config import WorkerSettings
from auditor.db.session import session_scope
from auditor.worker.context import session_factory, snapshot_cache, worker_settings

__all__ = ["audit_dataset", "audit_release", "deliver_alerts", "deliver_webhook", "enqueue_audit", "finish_audit", "mlflow_write_back", "sweep"]

log = logging.getLogger(__name__)

# Errors after which the same audit may well succeed: the database went away, a lock
# timed out, a serialization conflict. Anything else is recorded and left to the sweep.
TRANSIENT = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)


def _lease(w: WorkerSettings) -> timedelta:
    # A running audit renews its lease every quarter of it (runner.Heartbeat); a run whose
    # heartbeat is older is dead (its worker was killed) and the next claim takes it over.
    return w.lease


def _heartbeat(task, run_id: int, task_id: str) -> runner.Heartbeat:
    return runner.Heartbeat(session_factory(task), run_id, task_id=task_id, every=_lease(worker_settings(task))
                            .total_seconds() / 4)


# finish_audit polls its group many times a second; it renews the run's lease at most
# this often (per process; a missed renewal only shortens the margin of one lease).
_last_beat: dict[int, float] = {}


def _after_run(task, outcome: runner.Outcome) -> None:
    if outcome.state == "succeeded":
        _notify(task, outcome)
    if outcome.needs_follow_up:
        enqueue_audit(_dataset_of(task, outcome.run_id))
    if outcome.state == "succeeded" and outcome.run_id is not None:
        _request_mlflow_write_back(task, outcome.run_id)
        _request_plans(task, outcome.run_id)


def _notify(task, outcome: runner.Outcome) -> None:
    """The workspace's webhooks hear of the audit and its alerts: their deliveries were stored
    with the audit's results (:func:`~auditor.audit.runner.finish`); here they are published,
    and any message lost is sent by the sweep."""
    _publish_deliveries(list(outcome.delivery_ids))


def _publish_deliveries(ids: list[int]) -> None:
    for delivery_id in ids:
        try:
            deliver_webhook.apply_async((delivery_id,), retry=False, ignore_result=True)
        except Exception as exc:  # any broker failure: the sweep sends it later
            log.warning("could not queue webhook delivery %s (%s); the sweep will", delivery_id,
                        exc.__class__.__name__)


def _request_plans(task, run_id: int) -> None:
    """Ask for the plans of the releases the audit did not certify (``AUDITOR_PLANS_PER_AUDIT`` of
    them), so the overview can say what to label next. The audit is already written: nothing
    here may fail it, so any error is logged only (a page view asks for a missing plan)."""
    limit = worker_settings(task).plans_per_audit
    if limit <= 0:
        return
    try:
        from auditor.worker.plans import request_after_audit

        request_after_audit(session_factory(task), run_id, limit)
    except Exception as exc:
        log.warning("could not request the plans after audit run %s (%s: %s)", run_id, exc.__class__.__name__, exc)


def _dataset_of(task, run_id: int) -> int:
    from auditor.db.models import AuditRun

    with session_scope(session_factory(task)) as session:
        return session.get(AuditRun, run_id).dataset_id


def _retry_or_raise(task, exc: BaseException):
    w = worker_settings(task)
    if runner.is_transient(exc) and task.request.retries < w.max_retries:
        countdown = w.retry_backoff * 2 ** task.request.retries
        log.warning("audit attempt failed (%s); retrying in %.1fs", exc.__class__.__name__, countdown)
        raise task.retry(exc=exc, countdown=countdown, max_retries=w.max_retries)
    raise exc


@shared_task(bind=True, name="workers.tasks.audit_dataset")
def audit_dataset(self, dataset_id: int, requested_at: float | None = None) -> dict[str, Any]:
    """Audit one dataset if it needs it (:func:`auditor.audit.runner.run_audit`, with this
    process's snapshot cache and, for large datasets, the per-release fan-out); returns the
    outcome (state, run id, versions). ``requested_at`` (Unix time, set by
    :func:`enqueue_audit`) becomes a new run's ``created_at``."""
    w = worker_settings(self)
    options = AuditOptions.from_settings(w)
    factory = session_factory(self)
    task_id = self.request.id or uuid.uuid4().hex

    def fan_out(run_id: int, snap, timings: dict, used: AuditOptions) -> runner.Outcome | None:
        if not snap.releases or snap.counts.shape[0] < w.fanout_min_items:
            return None
        return _fan_out(self, run_id, task_id, snap, used, timings)

    try:
        outcome = runner.run_audit(factory, dataset_id, task_id=task_id, options=options, lease=_lease(w),
                                   cache=snapshot_cache(self.app.conf.get("auditor_database_url")),
                                   fan_out=fan_out, requested_at=requested_at)
    except SoftTimeLimitExceeded:  # recorded on the run by run_audit, not retried
        return {"state": "failed", "dataset_id": dataset_id, "error": "soft time limit exceeded"}
    except BaseException as exc:  # recorded on the run by run_audit (when it had claimed one)
        if not runner.is_transient(exc):
            # The same data would fail the same way, so it is not retried (a later data
            # version gets a run of its own).
            log.error("audit of dataset %s failed: %s", dataset_id, exc.__class__.__name__, exc_info=exc)
            return {"state": "failed", "dataset_id": dataset_id, "error": str(exc)[:500]}
        _retry_or_raise(self, exc)
    _after_run(self, outcome)
    return {"state": outcome.state, "run_id": outcome.run_id, "data_version": outcome.data_version,
            "follow_up": outcome.needs_follow_up, **outcome.details}


def _fan_out(task, run_id: int, task_id: str, snap, options: AuditOptions, timings: dict) -> runner.Outcome:
    """Per-release parts as a Celery group started first; the dataset part runs here meanwhile;
    ``finish_audit`` writes once the group is done."""
    opts = options.__dict__
    upper = upper_summary(snap)
    parts = group(audit_release.s(release_payload(snap, r, tau=options.tau), upper, opts, run_id, task_id)
                  for r in snap.releases).apply_async()
    parts.save()
    t0 = time.perf_counter()
    ds = runner.plain(dataset_part(snap, options))
    timings = {**timings, "dataset_part": time.perf_counter() - t0}
    finish_audit.delay(parts.id, run_id, task_id, snap.data_version, ds, runner.previous_dict(snap.previous), opts,
                       timings, time.time())
    return runner.Outcome("fanned_out", run_id, snap.data_version, timings=timings,
                          details={"parts": len(parts)})


def _options_from(opts: dict[str, Any]) -> AuditOptions:
    return AuditOptions(**opts)


@shared_task(bind=True, name="workers.tasks.audit_release")
def audit_release(self, payload: dict[str, Any], upper: dict[str, Any], opts: dict[str, Any],
                  run_id: int | None = None, task_id: str | None = None) -> dict[str, Any]:
    """One release's certification and survey equivalence (a part of a fanned-out audit);
    it renews the run's lease while it computes."""
    if run_id is None or task_id is None:
        return runner.plain(release_part(payload, upper, _options_from(opts)))
    with _heartbeat(self, run_id, task_id):
        return runner.plain(release_part(payload, upper, _options_from(opts)))


# Unlimited retries: it reschedules itself while the parts run; the run's lease bounds the wait.
@shared_task(bind=True, name="workers.tasks.finish_audit", max_retries=None)
def finish_audit(self, group_id: str, run_id: int, task_id: str, data_version: int, ds: dict[str, Any],
                 previous: dict[str, Any], opts: dict[str, Any], timings: dict[str, float],
                 started: float) -> dict[str, Any]:
    """Wait for the release parts (by rescheduling itself, holding no worker slot), merge, write once."""
    w = worker_settings(self)
    factory = session_factory(self)
    parts = GroupResult.restore(group_id, app=self.app)
    expired = time.time() - started > w.time_limit
    if time.monotonic() - _last_beat.get(run_id, -math.inf) > w.lease_seconds / 4:
        _last_beat[run_id] = time.monotonic()
        try:
            with session_scope(factory) as session:
                heartbeat_audit(session, run_id, task_id=task_id)
        except TRANSIENT:
            log.warning("heartbeat of audit run %s failed", run_id)
    if parts is None or expired or parts.failed():
        # Lost or late parts (a worker died, the results expired) may well succeed next
        # time; a part's own exception is judged as any audit error is.
        if parts is None or expired:
            why, retryable = ("release parts lost" if parts is None else "release parts timed out"), True
        else:
            cause = next(r.result for r in parts.results if r.failed())
            why = f"a release part failed: {cause!r}"
            # The parts compute on their payload and touch no database: their own errors
            # recur with the same data; a worker that died under one may not.
            retryable = isinstance(cause, WorkerLostError | MemoryError) or (
                isinstance(cause, BaseException) and runner.is_transient(cause))
            parts.forget()
        runner.fail(factory, run_id, task_id=task_id, exc=RuntimeError(why), retryable=retryable)
        _last_beat.pop(run_id, None)
        return {"state": "failed", "run_id": run_id, "error": why, "retryable": retryable}
    if not parts.ready():
        # Poll soon, then less often (at most once a second); the time limit bounds the wait.
        raise self.retry(countdown=min(1.0, 0.05 * 2 ** min(self.request.retries, 5)))
    try:
        results = parts.get(disable_sync_subtasks=False)
        done = runner.finish(factory, run_id, task_id=task_id, data_version=data_version,
                             merged=merge_parts(ds, results), previous=previous, options=_options_from(opts),
                             timings=timings)
    except BaseException as exc:  # recorded; the sweep retries the audit with backoff
        runner.fail(factory, run_id, task_id=task_id, exc=exc)
        raise
    parts.forget()
    _last_beat.pop(run_id, None)
    outcome = runner.Outcome("succeeded" if done.written else "lost", run_id, data_version, done.current_version,
                             done.alert_ids, delivery_ids=done.delivery_ids)
    _after_run(self, outcome)
    return {"state": outcome.state, "run_id": run_id, "data_version": data_version,
            "follow_up": outcome.needs_follow_up}


@shared_task(bind=True, name="workers.tasks.sweep")
def sweep(self) -> list[int]:
    """Enqueue an audit of every dataset whose data is newer than its last succeeded audit,
    and every webhook delivery whose message was lost."""
    w = worker_settings(self)
    with session_scope(session_factory(self)) as session:
        ids = stale_datasets(session, lease=_lease(w), retry_backoff=w.retry_backoff)
        lost = webhooks.stale_deliveries(session)
    for dataset_id in ids:
        audit_dataset.delay(dataset_id)
    _publish_deliveries(lost)
    return ids


@shared_task(bind=True, name="workers.tasks.deliver_alerts")
def deliver_alerts(self, alert_ids: list[int]) -> int:
    """Send stored alerts to their workspaces' webhooks (``alert.raised``) and to the channels their
    rules name; returns the deliveries queued."""
    if not alert_ids:
        return 0
    with session_scope(session_factory(self)) as session:
        ids = webhooks.alerts_raised(session, alert_ids) + route_alerts(session, alert_ids)
    _publish_deliveries(ids)
    return len(ids)


# Unlimited Celery retries: the delivery's own attempt count (AUDITOR_WEBHOOK_MAX_ATTEMPTS) ends them.
@shared_task(bind=True, name="workers.tasks.deliver_webhook", max_retries=None)
def deliver_webhook(self, delivery_id: int) -> dict[str, Any]:
    """One attempt at an outgoing webhook delivery (or an alert channel's message); a failed one is
    retried after its backoff."""
    w = worker_settings(self)
    try:
        done = webhooks.attempt(session_factory(self), int(delivery_id), max_attempts=w.webhook_max_attempts,
                                backoff=w.webhook_retry_backoff, allow_private=w.webhook_allow_private,
                                send_channel=channels.sender(channels.Smtp.from_settings(w), w.base_url))
    except TRANSIENT as exc:  # the database is away: the delivery is untouched, try again
        raise self.retry(exc=exc, countdown=w.webhook_retry_backoff) from exc
    if done.retry_in is not None:
        raise self.retry(countdown=done.retry_in)
    return {"delivery_id": delivery_id, "status": done.status, "response_code": done.response_code}


# --- MLflow model registry: verdicts back as model version tags -----------------------------


def _request_mlflow_write_back(task, run_id: int) -> None:
    """Enqueue :func:`mlflow_write_back` when the audited dataset has an MLflow connector.

    The audit is already written: nothing here may fail it, so any error is logged only
    (the next audit writes the registry again)."""
    try:
        from auditor.connectors.mlflow import dataset_with_connector

        with session_scope(session_factory(task)) as session:
            dataset_id = dataset_with_connector(session, run_id)
        if dataset_id is not None:
            mlflow_write_back.apply_async((dataset_id,), retry=False)
    except Exception as exc:
        log.warning("could not request the MLflow write-back of audit run %s (%s: %s)", run_id,
                    exc.__class__.__name__, exc)


#: Retries of a write-back whose MLflow server was unreachable, after the audits' backoff
#: doubled each time (at most 10 minutes apart: about 47 minutes in all by default).
MLFLOW_WRITE_BACK_RETRIES = 12


@shared_task(bind=True, name="workers.tasks.mlflow_write_back", max_retries=MLFLOW_WRITE_BACK_RETRIES)
def mlflow_write_back(self, dataset_id: int) -> dict[str, Any]:
    """Tag the dataset's connected MLflow model versions with its latest audit's verdicts
    (:func:`auditor.connectors.mlflow.write_back`). A task of its own, after the audit: an
    MLflow outage is retried with backoff, never fails nor holds up an audit, and is logged
    and recorded on the connector (``last_error``)."""
    from auditor.connectors import mlflow as connector

    w = worker_settings(self)
    try:
        return connector.write_back(session_factory(self), dataset_id, base_url=w.base_url)
    except connector.RegistryUnavailable as exc:
        cause: BaseException = exc
    except TRANSIENT as exc:  # the database went away: the same write-back may succeed
        cause = exc
    except connector.ConnectorError as exc:  # e.g. the client is not installed on this worker
        log.error("MLflow write-back of dataset %s failed: %s", dataset_id, exc)
        return {"state": "failed", "dataset_id": dataset_id, "error": str(exc)[:500]}
    if self.request.retries >= MLFLOW_WRITE_BACK_RETRIES:
        log.error("MLflow write-back of dataset %s gave up after %d retries: %s", dataset_id,
                  self.request.retries, cause)
        return {"state": "failed", "dataset_id": dataset_id, "error": str(cause)[:500]}
    countdown = min(600.0, w.retry_backoff * 2 ** self.request.retries)
    log.warning("MLflow write-back of dataset %s failed (%s); retrying in %.0fs", dataset_id, cause, countdown)
    raise self.retry(exc=cause, countdown=countdown)


# --- enqueueing audits (the write path calls auditor.worker.dispatch.request_audit) ----------

#: After the broker could not be reached, this process does not try again for this many
#: seconds: every write meanwhile would wait for the connection to fail (about 2 s each
#: with Redis down), and the sweep enqueues their audits once the broker is back.
BROKER_DOWN_SECONDS = 15.0
_broker_down_until: dict[str, float] = {}  # broker URL → until when it is not tried


def enqueue_audit(dataset_id: int) -> str | None:
    """Enqueue an audit of ``dataset_id``; call after the write committed.

    Returns the task id, or None when the broker could not be reached, now or in the last
    :data:`BROKER_DOWN_SECONDS` (logged).
    """
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
