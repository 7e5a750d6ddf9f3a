"""Audit runs: the list of runs and one run's page."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from auditor.db import (
    Agreement,
    Alert,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    Model,
    PowerCurveRecord,
    QualityChange,
    Release,
    VendorReport,
)
from auditor.web.readmodels.common import (
    CE_NOTE,
    L_INTERVAL_NOTE,
    assumptions_view,
    best_rows,
    cert_view,
    curve_view,
)
from auditor.web.tables import Column, table_state
from auditor.web.timerange import TimeRange, time_range

RUN_COLUMNS = (
    Column("run", "run", numeric=True, first="desc"), Column("dataset", "dataset"),
    Column("version", "data version", numeric=True, first="desc"), Column("status", "status"),
    Column("queued", "queued", first="desc"), Column("waited", "waited (s)", sortable=False, numeric=True),
    Column("ran", "ran (s)", sortable=False, numeric=True), Column("error", "error", sortable=False),
)


def audit_runs(db: Session, workspace_id: int, args=None, *, period: TimeRange | None = None) -> dict:
    """The workspace's audit runs, newest first, filtered by dataset, state and when they were
    queued (``period``), paged in SQL."""
    period = period or time_range({}, default="all")
    datasets = db.execute(select(Dataset.id, Dataset.name).where(Dataset.workspace_id == workspace_id)
                          .order_by(Dataset.name)).all()
    table = table_state("runs", RUN_COLUMNS, default_sort="run", default_direction="desc", per_page=50, args=args,
                        filters={"status": tuple(s.value for s in AuditStatus),
                                 "dataset_id": tuple(str(d.id) for d in datasets)})
    stmt = (select(AuditRun, Dataset.name).options(defer(AuditRun.summary), defer(AuditRun.parameters))
            .join(Dataset, AuditRun.dataset_id == Dataset.id)
            .where(Dataset.workspace_id == workspace_id, *period.where(AuditRun.created_at)))
    if "status" in table.filters:
        stmt = stmt.where(AuditRun.status == AuditStatus(table.filters["status"]))
    if "dataset_id" in table.filters:
        stmt = stmt.where(AuditRun.dataset_id == int(table.filters["dataset_id"]))
    stmt = table.sql_order(stmt, {"run": AuditRun.id, "dataset": Dataset.name, "version": AuditRun.data_version,
                                  "status": AuditRun.status, "queued": AuditRun.created_at}, AuditRun.id)
    table.fetch(db, stmt)
    return {"table": table, "runs": table.rows, "datasets": datasets, "statuses": [s.value for s in AuditStatus],
            "period": period}


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    return (later - earlier).total_seconds() if later is not None and earlier is not None else None


_TIMING_WORDS = {"claim": "claim the run", "snapshot": "read the data", "compute": "compute the statistics",
                 "write": "write the results"}


def audit_run_page(db: Session, run: AuditRun, ds: Dataset) -> dict:
    """One audit: its data version, timings and notes, and every result it wrote (bounded lists)."""
    summary = run.summary or {}
    timings = [{"step": _TIMING_WORDS.get(k, k.replace("_", " ")), "seconds": v}
               for k, v in (summary.get("timings") or {}).items() if isinstance(v, int | float)]
    certs = db.execute(select(Certification, Release, Model).join(Release, Certification.release_id == Release.id)
                       .join(Model, Release.model_id == Model.id).where(Certification.audit_run_id == run.id)
                       .order_by(Model.name, Release.released_at.asc().nulls_last(), Release.id).limit(500)).all()
    curves = list(db.scalars(select(PowerCurveRecord).options(defer(PowerCurveRecord.points))
                             .where(PowerCurveRecord.audit_run_id == run.id).order_by(PowerCurveRecord.id).limit(500)))
    release_names = {r.id: f"{m.name} {r.version}" for _, r, m in certs}
    previous = db.scalar(select(func.max(AuditRun.id)).where(AuditRun.dataset_id == run.dataset_id,
                                                            AuditRun.id < run.id))
    following = db.scalar(select(func.min(AuditRun.id)).where(AuditRun.dataset_id == run.dataset_id,
                                                             AuditRun.id > run.id))
    counts = {k: summary.get(k) for k in ("n_items", "n_labeled_items", "n_annotations", "n_annotators", "n_releases")}
    return {
        "run": run, "dataset": ds, "summary": summary, "counts": counts, "timings": timings,
        "waited": _seconds(run.started_at, run.created_at), "ran": _seconds(run.finished_at, run.started_at),
        "notes": summary.get("notes") or [], "parameters": run.parameters or {}, "upper": summary.get("upper") or {},
        "certifications": [{"cert": c, "release": r, "model": m, "view": cert_view(c)} for c, r, m in certs],
        "best": best_rows(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id)
                                     .order_by(BestScore.metric))),
        "agreements": list(db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id)
                                      .order_by(Agreement.vendor.nulls_first(), Agreement.coefficient).limit(500))),
        "vendors": list(db.scalars(select(VendorReport).options(defer(VendorReport.annotators),
                                                                defer(VendorReport.details))
                                   .where(VendorReport.audit_run_id == run.id).order_by(VendorReport.vendor)
                                   .limit(500))),
        "curves": [{"curve": c, "release": release_names.get(c.release_id) if c.release_id else None,
                    "view": curve_view(c) if c.release_id else None} for c in curves],
        "alerts": list(db.scalars(select(Alert).where(Alert.audit_run_id == run.id)
                                  .order_by(Alert.created_at.desc(), Alert.id.desc()).limit(50))),
        "quality_changes": list(db.scalars(select(QualityChange).where(QualityChange.audit_run_id == run.id)
                                           .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc())
                                           .limit(50))),
        "assumptions": assumptions_view(summary.get("assumptions")),
        "previous_id": previous, "next_id": following, "ce_note": CE_NOTE, "l_note": L_INTERVAL_NOTE,
    }
