"""The audit runs' SQL: claim a run, renew its lease, write its results once, find stale datasets.

A dataset is *stale* when its ``data_version`` is newer than its last succeeded audit.
At most one run per dataset is ``running``; a run whose heartbeat is older than its
lease is known dead (its worker was killed) and the next claim takes it over. Results
are written in one transaction that first checks the run is still owned by the writer,
so a run taken over never writes twice. What an audit reads is the snapshot
repository's (:mod:`auditor.audit.snapshot`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from auditor import timestamps
from auditor.audit.quality import SKIPPED_STAMPS, update_quality
from auditor.db.models import (
    Agreement,
    Alert,
    AuditOutbox,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    Model,
    PowerCurveRecord,
    Release,
    VendorReport,
)
from auditor.db.session import WRITE_OPTIONS

__all__ = [
    "Claim",
    "Finished",
    "alerts_by_id",
    "claim_audit",
    "fail_audit",
    "find_datasets",
    "finish_audit",
    "heartbeat_audit",
    "latest_run",
    "latest_runs",
    "run_results",
    "stale_datasets",
]


def utcnow() -> datetime:
    return datetime.now(UTC)


def _aware(dt: datetime | None) -> datetime | None:
    # SQLite hands timezone-aware columns back naive; they were written in UTC.
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


# --------------------------------------------------------------------------- claims


@dataclass(frozen=True)
class Claim:
    """Outcome of :func:`claim_audit`.

    ``state`` is ``"claimed"`` (``run_id`` is ours), ``"busy"`` (another live run),
    ``"current"`` (the last succeeded audit already covers ``data_version``),
    ``"abandoned"`` (its attempts kept dying) or ``"missing"`` (no such dataset).
    """

    state: str
    run_id: int | None = None
    data_version: int | None = None
    took_over: bool = False


def _begin_write(session: Session) -> None:
    # SQLite: BEGIN IMMEDIATE serialises writers; PostgreSQL: the row lock below does.
    if not session.in_transaction() or session.get_transaction().connections == {}:
        session.connection(execution_options=WRITE_OPTIONS)


def _lock_dataset(session: Session, dataset_id: int) -> Dataset | None:
    _begin_write(session)
    return session.execute(select(Dataset).where(Dataset.id == dataset_id).with_for_update()).scalar_one_or_none()


def _last_succeeded_version(session: Session, dataset_id: int) -> int | None:
    return session.execute(
        select(func.max(AuditRun.data_version)).where(
            AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.SUCCEEDED)
    ).scalar_one()


def claim_audit(session: Session, dataset_id: int, *, task_id: str, lease: timedelta,
                parameters: Mapping[str, Any] | None = None, max_attempts: int = 3,
                requested_at: float | None = None) -> Claim:
    """Make ``task_id`` the one running audit of the dataset, if it needs one.

    A ``running`` run whose heartbeat (:func:`heartbeat_audit`, else its start) is older
    than ``lease`` is dead and is taken over: it keeps its id, so a dead attempt leaves
    no second row behind. A run whose
    attempts all died (``max_attempts``) is recorded as failed instead (state
    ``"abandoned"``): an audit that kills its worker every time must not loop.
    A new run is created at ``requested_at`` (Unix time of the request, if given; else at
    the oldest write still waiting for an audit, for a run the sweep asked for; never in
    the future), so its queued time counts from the request.
    """
    dataset = _lock_dataset(session, dataset_id)
    if dataset is None:
        return Claim("missing")
    now = utcnow()
    running = session.execute(
        select(AuditRun).where(AuditRun.dataset_id == dataset_id, AuditRun.status == AuditStatus.RUNNING)
        .order_by(AuditRun.id.desc()).with_for_update()
    ).scalars().all()
    live = [r for r in running if r.task_id == task_id or _alive(r, now, lease)]
    if live and live[0].task_id != task_id:
        return Claim("busy", live[0].id, live[0].data_version)
    done = _last_succeeded_version(session, dataset_id)
    if done is not None and done >= dataset.data_version:
        _mark_outbox(session, dataset_id, done, now)
        for r in running:  # dead runs of versions already covered
            r.status, r.finished_at, r.error = AuditStatus.FAILED, now, "abandoned: worker lost"
        return Claim("current", None, done)
    params = dict(parameters or {})
    if running:
        run = running[0]
        for r in running[1:]:
            r.status, r.finished_at, r.error = AuditStatus.FAILED, now, "abandoned: worker lost"
        # Only a dead attempt leaves a run "running" for a claim to find (a lease that
        # expired, or its own message redelivered after its process died).
        took_over = True
        attempts = int((run.parameters or {}).get("attempts", 1)) + 1
        run.parameters = {**params, "attempts": attempts}
        if attempts > max_attempts:
            run.status, run.finished_at = AuditStatus.FAILED, now
            run.error = f"abandoned after {attempts - 1} attempts that did not finish (worker lost or killed)"
            session.flush()
            return Claim("abandoned", run.id, run.data_version)
        run.task_id, run.started_at, run.heartbeat_at, run.data_version = task_id, now, now, dataset.data_version
    else:
        took_over = False
        run = AuditRun(dataset_id=dataset_id, data_version=dataset.data_version, status=AuditStatus.RUNNING,
                       task_id=task_id, started_at=now, heartbeat_at=now, parameters={**params, "attempts": 1})
        asked = _requested(session, dataset_id, requested_at)
        if asked is not None:
            run.created_at = min(now, asked)
        session.add(run)
    session.flush()
    return Claim("claimed", run.id, dataset.data_version, took_over)


def _requested(session: Session, dataset_id: int, requested_at: float | None) -> datetime | None:
    """When the audit about to run was asked for: the request's time, else the oldest write
    of the dataset not yet covered by an audit (its outbox row), else unknown."""
    if requested_at is not None:
        return datetime.fromtimestamp(float(requested_at), UTC)
    oldest = session.scalar(select(func.min(AuditOutbox.created_at)).where(
        AuditOutbox.dataset_id == dataset_id, AuditOutbox.processed_at.is_(None)))
    return _aware(oldest)


def _alive(run: Any, now: datetime, lease: timedelta) -> bool:
    beat = run.heartbeat_at or run.started_at
    return beat is not None and _aware(beat) > now - lease


def heartbeat_audit(session: Session, run_id: int, *, task_id: str) -> bool:
    """Renew the lease of run ``run_id`` while ``task_id`` still owns it; False once it does not
    (taken over, finished or failed), which tells the worker to stop beating."""
    _begin_write(session)
    res = session.execute(
        update(AuditRun).where(AuditRun.id == run_id, AuditRun.task_id == task_id,
                               AuditRun.status == AuditStatus.RUNNING)
        .values(heartbeat_at=utcnow())
    )
    return res.rowcount == 1


def fail_audit(session: Session, run_id: int, *, task_id: str, error: str, retryable: bool = True) -> bool:
    """Record the run as failed with ``error``, if ``task_id`` still owns it.

    ``retryable=False`` says the same data will fail the same way: the sweep then leaves
    this data version alone (a later version gets a new run).
    """
    _begin_write(session)
    res = session.execute(
        update(AuditRun).where(AuditRun.id == run_id, AuditRun.task_id == task_id,
                               AuditRun.status == AuditStatus.RUNNING)
        .values(status=AuditStatus.FAILED, error=error[:20_000], finished_at=utcnow(), retryable=retryable)
    )
    return res.rowcount == 1


def _mark_outbox(session: Session, dataset_id: int, version: int, now: datetime) -> None:
    session.execute(
        update(AuditOutbox).where(AuditOutbox.dataset_id == dataset_id, AuditOutbox.processed_at.is_(None),
                                  AuditOutbox.data_version <= version).values(processed_at=now)
    )


def stale_datasets(session: Session, *, lease: timedelta, retry_backoff: float,
                   max_backoff: float = 3600.0) -> list[int]:
    """Datasets whose data is newer than their last succeeded audit and that no live run covers.

    A dataset whose audits of its current version keep failing is retried after
    ``retry_backoff · 2^(failures − 1)`` seconds (at most ``max_backoff``).
    """
    now = utcnow()
    done = (select(AuditRun.dataset_id, func.max(AuditRun.data_version).label("v"))
            .where(AuditRun.status == AuditStatus.SUCCEEDED).group_by(AuditRun.dataset_id).subquery())
    rows = session.execute(
        select(Dataset.id, Dataset.data_version).outerjoin(done, done.c.dataset_id == Dataset.id)
        .where((done.c.v.is_(None) & (Dataset.data_version > 0)) | (done.c.v < Dataset.data_version))
        .order_by(Dataset.id)
    ).all()
    if not rows:
        return []
    ids = [r.id for r in rows]
    version = {r.id: r.data_version for r in rows}
    stale = {r.id for r in rows}
    runs = session.execute(
        select(AuditRun.dataset_id, AuditRun.status, AuditRun.data_version, AuditRun.started_at,
               AuditRun.heartbeat_at, AuditRun.finished_at, AuditRun.retryable)
        .join(Dataset, Dataset.id == AuditRun.dataset_id)
        .where((AuditRun.status == AuditStatus.RUNNING)
               | ((AuditRun.status == AuditStatus.FAILED) & (AuditRun.data_version == Dataset.data_version)))
    ).all()
    blocked: set[int] = set()
    failures: dict[int, list[datetime]] = {}
    for r in runs:
        if r.dataset_id not in stale:
            continue
        if r.status == AuditStatus.RUNNING and _alive(r, now, lease):
            blocked.add(r.dataset_id)
        elif r.status == AuditStatus.FAILED and r.retryable is False:
            blocked.add(r.dataset_id)  # the same data fails the same way: wait for new data
        elif r.status == AuditStatus.FAILED and r.data_version == version[r.dataset_id] and r.finished_at:
            failures.setdefault(r.dataset_id, []).append(_aware(r.finished_at))
    for ds, times in failures.items():
        wait = min(max_backoff, retry_backoff * 2 ** (len(times) - 1))
        if max(times) > now - timedelta(seconds=wait):
            blocked.add(ds)
    return [i for i in ids if i not in blocked]


# --------------------------------------------------------------------------- results


_RESULT_TABLES = {
    "certifications": Certification,
    "power_curves": PowerCurveRecord,
    "vendor_reports": VendorReport,
    "best_scores": BestScore,
    "agreements": Agreement,
}


@dataclass(frozen=True)
class Finished:
    """Outcome of :func:`finish_audit`: whether we wrote, and the dataset's version now."""

    written: bool
    current_version: int
    alert_ids: tuple[int, ...] = ()
    #: Webhook deliveries stored with the results (set by the audit runner).
    delivery_ids: tuple[int, ...] = ()
    #: Rows written, replaced or deleted, by table name (for :func:`~auditor.db.session.refresh_statistics`).
    written_rows: Mapping[str, int] = field(default_factory=dict)


def _certified_since_before(session: Session, dataset_id: int, run_id: int, release_ids: list[int]) -> dict[int, int]:
    """Per release whose latest certification on this dataset before ``run_id`` is certified:
    the run its certified streak began with (see ``Certification.certified_since_run_id``)."""
    if not release_ids:
        return {}
    latest = (select(Certification.release_id, func.max(Certification.audit_run_id).label("run_id"))
              .join(AuditRun, AuditRun.id == Certification.audit_run_id)
              .where(AuditRun.dataset_id == dataset_id, Certification.release_id.in_(release_ids),
                     Certification.audit_run_id < run_id)
              .group_by(Certification.release_id).subquery())
    rows = session.execute(
        select(Certification.release_id, Certification.certified_since_run_id)
        .join(latest, (latest.c.release_id == Certification.release_id) & (latest.c.run_id == Certification.audit_run_id))
        .where(Certification.certified.is_(True), Certification.certified_since_run_id.is_not(None)))
    return {rid: since for rid, since in rows}


def finish_audit(session: Session, run_id: int, *, task_id: str, data_version: int,
                 results: Mapping[str, Iterable[Mapping[str, Any]]], summary: Mapping[str, Any],
                 alerts: Iterable[Mapping[str, Any]] = (), timings: Mapping[str, float] | None = None,
                 quality_alpha: float | None = 0.05) -> Finished:
    """Write every result row of the run and mark it succeeded, in the caller's transaction.

    Nothing is written unless ``task_id`` still owns the running run (a run taken over
    after its lease expired is finished by its new owner only). The quality monitors
    (:func:`auditor.audit.quality.update_quality`, false-alarm level ``quality_alpha``;
    None leaves them as they are) take in the annotations up to ``data_version`` in the
    same transaction, and their change alerts are written with the run's.
    """
    _begin_write(session)
    dataset_id = session.execute(select(AuditRun.dataset_id).where(AuditRun.id == run_id)).scalar_one()
    dataset = _lock_dataset(session, dataset_id)
    run = session.execute(select(AuditRun).where(AuditRun.id == run_id).with_for_update()).scalar_one()
    if run.status != AuditStatus.RUNNING or run.task_id != task_id:
        return Finished(False, int(dataset.data_version))
    now = utcnow()
    alerts = list(alerts)
    written: dict[str, int] = {}
    skipped: dict[str, int] = {}
    if quality_alpha is not None:
        alerts += update_quality(session, dataset, up_to=data_version, run_id=run_id, alpha=quality_alpha,
                                 written=written, skipped=skipped)
    for key, model in _RESULT_TABLES.items():
        rows = [dict(r) for r in results.get(key, ())]
        written[model.__tablename__] = written.get(model.__tablename__, 0) + len(rows)
        if key != "certifications":
            for r in rows:
                r.pop("data_version", None)
        else:
            since = _certified_since_before(session, dataset_id, run_id, [r["release_id"] for r in rows])
            for r in rows:
                r["data_version"] = data_version
                r["certified_since_run_id"] = (since.get(r["release_id"]) or run_id) if r["certified"] else None
        session.add_all(model(audit_run_id=run_id, **r) for r in rows)
    new_alerts = [Alert(workspace_id=dataset.workspace_id, dataset_id=dataset.id, audit_run_id=run_id, **a)
                  for a in alerts]
    session.add_all(new_alerts)
    run.status, run.data_version, run.finished_at = AuditStatus.SUCCEEDED, data_version, now
    run.summary = {**summary, "timings": dict(timings or {}), **_skipped_summary(summary, skipped)}
    run.error = None
    _mark_outbox(session, dataset.id, data_version, now)
    session.flush()
    written[Alert.__tablename__] = written.get(Alert.__tablename__, 0) + len(new_alerts)
    return Finished(True, int(dataset.data_version), tuple(a.id for a in new_alerts), written_rows=written)


def _skipped_summary(summary: Mapping[str, Any], skipped: Mapping[str, int]) -> dict[str, Any]:
    """What the quality windows left out, for the run's summary (and a note saying so)."""
    n = skipped.get(SKIPPED_STAMPS, 0)
    if not n:
        return {}
    note = (f"quality windows: {n} annotation(s) with a time stamp outside the accepted range "
            f"({timestamps.EARLIEST:%Y-%m-%d} to now + {timestamps.FUTURE_TOLERANCE.days} day) were left out of "
            "the weekly windows (the other statistics count them); re-import them with their true time stamps")
    return {"quality_skipped": dict(skipped), "notes": [*(summary.get("notes") or []), note]}


def latest_runs(session: Session, dataset_ids: Iterable[int], *, status: AuditStatus = AuditStatus.SUCCEEDED
                ) -> dict[int, AuditRun]:
    """The latest run with ``status`` (by default the latest successful audit) of each
    dataset, by data version then id, in one query."""
    ids = list(dataset_ids)
    if not ids:
        return {}
    ranked = (select(AuditRun.id, func.row_number().over(
        partition_by=AuditRun.dataset_id, order_by=(AuditRun.data_version.desc(), AuditRun.id.desc())).label("rn"))
        .where(AuditRun.dataset_id.in_(ids), AuditRun.status == status).subquery())
    runs = session.scalars(select(AuditRun).join(ranked, ranked.c.id == AuditRun.id).where(ranked.c.rn == 1))
    return {r.dataset_id: r for r in runs}


def latest_run(session: Session, dataset_id: int, *, status: AuditStatus | None = AuditStatus.SUCCEEDED
               ) -> AuditRun | None:
    """The dataset's latest run with ``status`` (as :func:`latest_runs`), or with
    ``status=None`` its most recent run of any state."""
    if status is not None:
        return latest_runs(session, [dataset_id], status=status).get(dataset_id)
    return session.execute(select(AuditRun).where(AuditRun.dataset_id == dataset_id)
                           .order_by(AuditRun.id.desc()).limit(1)).scalar_one_or_none()


def run_results(session: Session, run_id: int) -> dict[str, Any]:
    """All result rows of one run as plain dictionaries (columns by name)."""
    def rows(model) -> list[dict[str, Any]]:
        cols = [c.key for c in model.__table__.columns if c.key not in ("audit_run_id", "created_at")]
        return [{c: getattr(obj, c) for c in cols}
                for obj in session.execute(select(model).where(model.audit_run_id == run_id)
                                           .order_by(model.id)).scalars()]

    out = {key: rows(model) for key, model in _RESULT_TABLES.items()}
    out["alerts"] = rows(Alert)
    releases = {r.id: (r.name, r.version) for r in session.execute(
        select(Release.id, Release.version, Model.name).join(Model, Model.id == Release.model_id)
        .where(Release.id.in_([c["release_id"] for c in out["certifications"]])))}
    for c in out["certifications"] + out["power_curves"]:
        if c.get("release_id") in releases:
            c["model"], c["version"] = releases[c["release_id"]]
    return out


def alerts_by_id(session: Session, ids: Iterable[int]) -> list[dict[str, Any]]:
    """Alerts as JSON-ready dictionaries, with their dataset's name."""
    rows = session.execute(
        select(Alert, Dataset.name).join(Dataset, Dataset.id == Alert.dataset_id, isouter=True)
        .where(Alert.id.in_(list(ids))).order_by(Alert.id)
    ).all()
    return [{"id": a.id, "dataset_id": a.dataset_id, "dataset": name, "audit_run_id": a.audit_run_id,
             "kind": a.kind, "severity": str(a.severity), "subject": a.subject, "message": a.message,
             "details": a.details, "created_at": a.created_at.isoformat() if a.created_at else None}
            for a, name in rows]


def find_datasets(session: Session, name: str, *, workspace: str | None = None) -> list[tuple[int, str, int]]:
    """Datasets called ``name`` (in the workspace with slug ``workspace``): (id, workspace slug, data_version)."""
    from auditor.db.models import Workspace

    q = (select(Dataset.id, Workspace.slug, Dataset.data_version).join(Workspace, Workspace.id == Dataset.workspace_id)
         .where(Dataset.name == name))
    if workspace is not None:
        q = q.where(Workspace.slug == workspace)
    return [tuple(r) for r in session.execute(q.order_by(Dataset.id))]
