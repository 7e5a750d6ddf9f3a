"""Claiming, running and recording one audit, with a session factory and nothing else.

The Celery tasks call these steps; so can a test or a notebook. Each step owns one
transaction: the claim, the read-only snapshot, the single result write.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker

from auditor import webhooks
from auditor.alerting.routing import route_alerts
from auditor.alerting.settings import audit_options
from auditor.audit.inputs import AuditSnapshot, PreviousResults
from auditor.audit.pipeline import (
    AuditOptions,
    alerts_for,
    dataset_part,
    merge_parts,
    release_inline,
)
from auditor.audit.snapshot import SnapshotCache, load_audit_snapshot
from auditor.audit.store import (
    Claim,
    Finished,
    claim_audit,
    fail_audit,
    finish_audit,
    heartbeat_audit,
)
from auditor.db.session import refresh_statistics, session_scope
from auditor.jsonable import plain

__all__ = ["FanOut", "Heartbeat", "Outcome", "claim", "compute_inline", "fail", "finish", "is_transient", "plain", "run_audit",
           "snapshot"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What happened to one audit request (``state`` as in :class:`~auditor.audit.store.Claim`,
    or ``"succeeded"`` / ``"lost"`` after a run)."""

    state: str
    run_id: int | None = None
    data_version: int | None = None
    current_version: int | None = None
    alert_ids: tuple[int, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    #: Webhook deliveries stored in the transaction that wrote the results (to publish).
    delivery_ids: tuple[int, ...] = ()
    #: More to report (e.g. how many parts a fanned-out run started).
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def needs_follow_up(self) -> bool:
        """Data arrived while this run computed: exactly one more run is due."""
        return (self.state == "succeeded" and self.current_version is not None
                and self.data_version is not None and self.current_version > self.data_version)


def claim(factory: sessionmaker[Session], dataset_id: int, *, task_id: str, lease: timedelta,
          options: AuditOptions, requested_at: float | None = None) -> Claim:
    with session_scope(factory) as session:
        return claim_audit(session, dataset_id, task_id=task_id, lease=lease, parameters=options.to_dict(),
                           requested_at=requested_at)


class Heartbeat:
    """Renews a claimed run's lease from a background thread while the audit works.

    ``with Heartbeat(factory, run_id, task_id=..., every=lease / 4):`` beats every
    ``every`` seconds until the block ends or the run is no longer this task's (taken
    over, finished). A failed beat (database briefly away) is logged and tried again at
    the next tick: one lease holds several beats. A worker that dies stops beating, and
    its run is taken over once the lease has passed, not at the hard time limit.
    """

    def __init__(self, factory: sessionmaker[Session], run_id: int, *, task_id: str, every: float):
        self.factory, self.run_id, self.task_id, self.every = factory, run_id, task_id, max(0.05, float(every))
        self.beats = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"audit-heartbeat-{run_id}", daemon=True)

    def beat(self) -> bool:
        """One renewal now; False when the run is no longer this task's."""
        with session_scope(self.factory) as session:
            owned = heartbeat_audit(session, self.run_id, task_id=self.task_id)
        self.beats += owned
        return owned

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if not self.beat():
                    return
            except Exception as exc:  # the next tick tries again; the lease allows a few misses
                log.warning("heartbeat of audit run %s failed: %s", self.run_id, exc.__class__.__name__)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def snapshot(factory: sessionmaker[Session], dataset_id: int, *, cache: SnapshotCache | None = None
             ) -> AuditSnapshot:
    with session_scope(factory) as session:
        return load_audit_snapshot(session, dataset_id, cache=cache)


def compute_inline(snap: AuditSnapshot, options: AuditOptions) -> dict[str, Any]:
    """Every part of the audit in this process, merged."""
    ds = dataset_part(snap, options)
    parts = [release_inline(snap, r, ds["upper"], options) for r in snap.releases]
    return merge_parts(ds, parts)


def finish(factory: sessionmaker[Session], run_id: int, *, task_id: str, data_version: int,
           merged: Mapping[str, Any], previous: PreviousResults | Mapping[str, Any], options: AuditOptions,
           timings: Mapping[str, float]) -> Finished:
    """One transaction: all result rows, alerts, the run marked succeeded, the outbox processed,
    and the workspace webhooks' deliveries of the audit and its alerts (so that a crash after
    the commit cannot lose them: they are stored, and the sweep sends any whose message is
    lost). Storing the deliveries is inside a savepoint: if it fails, the audit still commits
    without them, and the failure is logged."""
    if not isinstance(previous, PreviousResults):
        previous = PreviousResults(previous.get("run_id"),
                                   {int(k): v for k, v in previous.get("certifications", {}).items()},
                                   dict(previous.get("vendors", {})))
    results = plain(merged["results"])
    alerts = alerts_for(previous, results, options)
    with session_scope(factory) as session:
        done = finish_audit(session, run_id, task_id=task_id, data_version=data_version, results=results,
                            summary=plain(merged["summary"]), alerts=plain(alerts), timings=timings,
                            quality_alpha=options.quality_alpha)
        if done.written:
            done = replace(done, delivery_ids=_store_deliveries(session, run_id, done.alert_ids))
    if done.written:
        # Committed: the tables it filled get fresh planner statistics now, not a minute later.
        refresh_statistics(factory, done.written_rows)
    return done


def _store_deliveries(session: Session, run_id: int, alert_ids: tuple[int, ...]) -> tuple[int, ...]:
    """The webhook deliveries of a written audit, in a savepoint of its transaction."""
    try:
        with session.begin_nested():
            return tuple(webhooks.audit_completed(session, run_id) + webhooks.alerts_raised(session, alert_ids)
                         + route_alerts(session, alert_ids))
    except Exception as exc:  # never fails the audit; nothing else can redo this, so say it loudly
        log.error("could not store the webhook deliveries of audit run %s: %s", run_id, exc.__class__.__name__,
                  exc_info=exc)
        return ()


# SQLSTATE classes and codes after which the same statement may well succeed: connection
# exceptions, transaction rollbacks (serialization, deadlock), insufficient resources,
# operator intervention (shutdown, cancel), a lock not available within lock_timeout.
_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57")
_TRANSIENT_SQLSTATES = frozenset({"55P03", "55006"})


def is_transient(exc: BaseException) -> bool:
    """Could the same audit of the same data succeed if tried again?

    Yes after a lost connection, a lock or pool timeout, a serialization conflict or a
    server shutting down; no after anything the data or the code will reproduce (an
    error of the statistics, or a statement PostgreSQL refuses as written, such as one
    with more than 65,535 parameters, which psycopg reports as an OperationalError
    without a SQLSTATE). A time limit is not transient either: the same work would
    take as long again.
    """
    if isinstance(exc, sa_exc.InterfaceError | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        if code:
            return code[:2] in _TRANSIENT_SQLSTATE_CLASSES or code in _TRANSIENT_SQLSTATES
        message = str(exc.orig).lower()
        # SQLite: a writer holds the database; psycopg: the connection broke mid-statement
        return isinstance(exc, sa_exc.OperationalError) and any(
            m in message for m in ("database is locked", "server closed the connection", "connection is closed",
                                   "consuming input failed", "terminating connection", "connection refused",
                                   "could not connect"))
    return isinstance(exc, ConnectionError)


def fail(factory: sessionmaker[Session], run_id: int, *, task_id: str, exc: BaseException,
         retryable: bool | None = None) -> bool:
    """Record the run as failed with the error and whether a retry may help (by default
    :func:`is_transient`); never raises."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    retryable = is_transient(exc) if retryable is None else retryable
    try:
        with session_scope(factory) as session:
            return fail_audit(session, run_id, task_id=task_id, error=text, retryable=retryable)
    except Exception:  # recording is best effort; the sweep retries the audit anyway
        return False


def previous_dict(previous: PreviousResults) -> dict[str, Any]:
    """The previous results as a JSON-ready mapping (to travel to a chord's callback)."""
    return plain({"run_id": previous.run_id, "certifications": dict(previous.certifications),
                  "vendors": dict(previous.vendors)})


#: ``fan_out(run_id, snapshot, timings, options)`` of :func:`run_audit`: starts the audit's parts
#: elsewhere and returns the outcome ``"fanned_out"`` (whoever joins the parts writes the
#: results), or returns None to compute in this process.
FanOut = Callable[[int, AuditSnapshot, dict, AuditOptions], "Outcome | None"]


def run_audit(factory: sessionmaker[Session], dataset_id: int, *, task_id: str, options: AuditOptions,
              lease: timedelta, cache: SnapshotCache | None = None, fan_out: FanOut | None = None,
              clock: Callable[[], float] = time.perf_counter, requested_at: float | None = None) -> Outcome:
    """Claim, snapshot, compute and write one audit: the one orchestration of an audit,
    called by the Celery task (with its snapshot cache and its fan-out), the CLI and the tests.

    The claimed run's lease is renewed by a :class:`Heartbeat` while it works. Any
    exception after the claim (a time limit included) is recorded on the run, with
    whether a retry may help (:func:`is_transient`), and raised again for the caller to
    retry or report.
    """
    t0 = clock()
    with session_scope(factory) as session:  # the workspace's own thresholds, where its admins set some
        options = audit_options(session, dataset_id, options)
    c = claim(factory, dataset_id, task_id=task_id, lease=lease, options=options, requested_at=requested_at)
    if c.state != "claimed":
        return Outcome(c.state, c.run_id, c.data_version)
    try:
        with Heartbeat(factory, c.run_id, task_id=task_id, every=lease.total_seconds() / 4):
            t1 = clock()
            snap = snapshot(factory, dataset_id, cache=cache)
            t2 = clock()
            timings = {"claim": t1 - t0, "snapshot": t2 - t1}
            if fan_out is not None:
                started = fan_out(c.run_id, snap, timings, options)
                if started is not None:
                    return started
            merged = compute_inline(snap, options)
            t3 = clock()
        timings["compute"] = t3 - t2
        done = finish(factory, c.run_id, task_id=task_id, data_version=snap.data_version, merged=merged,
                      previous=snap.previous, options=options, timings=timings)
    except BaseException as exc:
        fail(factory, c.run_id, task_id=task_id, exc=exc)
        raise
    timings["write"] = clock() - t3
    if not done.written:
        return Outcome("lost", c.run_id, snap.data_version, done.current_version)
    return Outcome("succeeded", c.run_id, snap.data_version, done.current_version, done.alert_ids, timings,
                   delivery_ids=done.delivery_ids)
