"""The overview page: latest releases, vendors, next steps, and what changed in a period."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session

from auditor.audit.store import latest_runs
from auditor.db import (
    Alert,
    AuditRun,
    AuditStatus,
    Certification,
    Dataset,
    ImportBatch,
    Item,
    Model,
    QualityChange,
    Release,
)
from auditor.web.readmodels.common import _upper, cert_view, certified_since
from auditor.web.readmodels.vendors import _vendor_rows
from auditor.web.tables import COUNT_CAP
from auditor.web.timerange import TimeRange, time_range

#: Latest releases listed on the overview (one per model, most recently released models first).
OVERVIEW_MODELS = 50


def _latest_release_rows(db: Session, workspace_id: int, run_ids: list[int]) -> list[dict]:
    """Each model's newest release (and the one before, to compare with), its certification in
    its dataset's latest audit and since when it is certified: four statements, whatever the history."""
    ranked = (select(Release.id, Release.model_id, func.row_number().over(
        partition_by=Release.model_id, order_by=(Release.released_at.desc().nulls_last(), Release.id.desc())).label("rn"))
        .join(Model, Release.model_id == Model.id).where(Model.workspace_id == workspace_id).subquery())
    pairs = db.execute(select(Release, Model, ranked.c.rn).join(Model, Release.model_id == Model.id)
                       .join(ranked, ranked.c.id == Release.id).where(ranked.c.rn <= 2)
                       .order_by(Model.name, ranked.c.rn).limit(2 * OVERVIEW_MODELS)).all()
    newest = [(rel, mod) for rel, mod, rn in pairs if rn == 1]
    previous = {mod.id: rel for rel, mod, rn in pairs if rn == 2}
    certs: dict[int, tuple[Certification, int]] = {}
    for cert, dataset_id in db.execute(
            select(Certification, AuditRun.dataset_id).join(AuditRun, Certification.audit_run_id == AuditRun.id)
            .where(Certification.release_id.in_([r.id for r, _ in newest] or [-1]), AuditRun.id.in_(run_ids or [-1]))
            .order_by(AuditRun.id.desc())):
        certs.setdefault(cert.release_id, (cert, dataset_id))
    since = certified_since(db, certs.values())
    steps = next_steps(db, [(rid, ds) for rid, (c, ds) in certs.items() if not c.certified])
    rows = []
    for rel, mod in newest:
        cert, dataset_id = certs.get(rel.id, (None, None))
        rows.append({"model": mod, "release": rel, "cert": cert, "dataset_id": dataset_id,
                     "view": cert_view(cert, since.get((rel.id, dataset_id))), "previous": previous.get(mod.id),
                     "next_step": steps.get((rel.id, dataset_id))})
    return rows


def next_steps(db: Session, pairs: list[tuple[int, int]]) -> dict[tuple[int, int], dict]:
    """The next labeling step of each (release, dataset) from its *stored* audit plan (computed by
    a worker; never asked for here), in one statement; nothing where no plan was made yet."""
    from auditor.db import models

    plan_table = getattr(models, "ReleasePlan", None)
    if plan_table is None:
        return {}
    out = {}
    for row in db.scalars(select(plan_table).where(tuple_(plan_table.release_id, plan_table.dataset_id)
                                                   .in_(pairs or [(-1, -1)]), plan_table.status == "succeeded")):
        plan = row.plan or {}
        if plan.get("certified_now"):
            continue
        out[(row.release_id, row.dataset_id)] = {"certifiable": plan.get("certifiable", True),
                                                 "recommended": plan.get("recommended"),
                                                 "probability": plan.get("probability"),
                                                 "audit_run_id": row.audit_run_id}
    return out


def overview(db: Session, workspace_id: int, *, now: datetime | None = None, period: TimeRange | None = None) -> dict:
    """The workspace at a glance; "what changed", "who changed" and the recent alerts follow
    ``period`` (the page's time range; the last 7 days when not given)."""
    now = now or datetime.now(UTC)
    period = period or time_range({}, default="7d", now=now)
    datasets = list(db.scalars(select(Dataset).where(Dataset.workspace_id == workspace_id).order_by(Dataset.name)))
    ids = [d.id for d in datasets]
    latest = latest_runs(db, ids)
    n_items = dict(db.execute(select(Item.dataset_id, func.count()).where(Item.dataset_id.in_(ids or [-1]))
                              .group_by(Item.dataset_id)).all())
    pending = dict(db.execute(select(AuditRun.dataset_id, func.count()).where(
        AuditRun.dataset_id.in_(ids or [-1]), AuditRun.status.in_([AuditStatus.QUEUED, AuditStatus.RUNNING]))
        .group_by(AuditRun.dataset_id)).all())
    ds_rows = [{"id": d.id, "name": d.name, "labels": list(d.labels), "data_version": d.data_version,
                "n_items": n_items.get(d.id, 0), "run": latest.get(d.id), **_upper(latest.get(d.id)),
                "stale": latest.get(d.id) is None or latest[d.id].data_version < d.data_version,
                "pending": pending.get(d.id, 0)} for d in datasets]

    run_ids = [r.id for r in latest.values()]
    names = {d.id: d.name for d in datasets}
    vendors = _vendor_rows(db, run_ids, names)
    releases = _latest_release_rows(db, workspace_id, run_ids)

    # Who changed: the newest changes the detectors found (by when an audit found them, within the
    # range: news since then), vendors and annotators alike.
    quality_changes = [{"change": ch, "dataset": name} for ch, name in db.execute(
        select(QualityChange, Dataset.name).join(Dataset, QualityChange.dataset_id == Dataset.id)
        .where(Dataset.workspace_id == workspace_id, *period.where(QualityChange.created_at))
        .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc()).limit(10))]

    alerts = list(db.scalars(select(Alert).where(Alert.workspace_id == workspace_id, *period.where(Alert.created_at))
                             .order_by(Alert.created_at.desc(), Alert.id.desc()).limit(10)))
    n_open = db.scalar(select(func.count()).select_from(
        select(Alert.id).where(Alert.workspace_id == workspace_id, Alert.acknowledged_at.is_(None))
        .limit(1001).subquery()))
    return {"datasets": ds_rows, "vendors": vendors, "releases": releases, "alerts": alerts, "n_open_alerts": n_open,
            "quality_changes": quality_changes, "changes": what_changed(db, workspace_id, period), "period": period}


def what_changed(db: Session, workspace_id: int, period: TimeRange) -> dict:
    """Uploads (per dataset and kind), audits (per state), new releases and alerts raised within
    ``period``: grouped counts, bounded whatever the range."""
    batches = db.execute(select(Dataset.name, ImportBatch.kind, func.count(), func.sum(ImportBatch.row_count))
                         .join(Dataset, ImportBatch.dataset_id == Dataset.id)
                         .where(Dataset.workspace_id == workspace_id, *period.where(ImportBatch.created_at))
                         .group_by(Dataset.name, ImportBatch.kind).order_by(Dataset.name).limit(200)).all()
    runs = db.execute(select(AuditRun.status, func.count()).join(Dataset, AuditRun.dataset_id == Dataset.id)
                      .where(Dataset.workspace_id == workspace_id, *period.where(AuditRun.created_at))
                      .group_by(AuditRun.status)).all()
    new_releases = db.execute(select(Model.name, Release.version, Release.id, Model.id)
                              .join(Model, Release.model_id == Model.id)
                              .where(Model.workspace_id == workspace_id, *period.where(Release.created_at))
                              .order_by(Release.created_at.desc()).limit(20)).all()
    n_alerts = db.scalar(select(func.count()).select_from(
        select(Alert.id).where(Alert.workspace_id == workspace_id, *period.where(Alert.created_at))
        .limit(COUNT_CAP + 1).subquery()))
    return {"batches": [{"dataset": n, "kind": str(k), "n": c, "rows": int(r or 0)} for n, k, c, r in batches],
            "runs": {str(s): c for s, c in runs}, "n_runs": sum(c for _, c in runs), "releases": new_releases,
            "n_alerts": n_alerts, "n_uploads": sum(c for *_, c, _r in batches)}


# --- dataset -------------------------------------------------------------------------------------
