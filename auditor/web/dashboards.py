"""Read models of the dashboards: one function per page, plain dicts for the templates and charts."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

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
    ImportBatch,
    Item,
    Model,
    PowerCurve,
    Release,
    VendorReport,
)
from auditor.db.queries_audit import latest_runs

__all__ = ["audit_runs", "dataset_page", "model_page", "overview", "vendor_page"]


def _upper(run: AuditRun | None) -> dict:
    upper = ((run.summary or {}).get("upper") or {}) if run else {}
    return {"u_t": upper.get("u_t"), "u_e": upper.get("u_e")}


def overview(db: Session, workspace_id: int, *, now: datetime | None = None) -> dict:
    now = now or datetime.now(UTC)
    since = now - timedelta(days=1)
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
    vendors = [{"vendor": v.vendor, "dataset": next(d.name for d in datasets if d.id == run.dataset_id),
                "dataset_id": run.dataset_id, "u_t": v.u_t, "u_e": v.u_e, "agreement": v.agreement,
                "expert_equivalence": v.expert_equivalence, "n_annotators": v.n_annotators}
               for v, run in db.execute(select(VendorReport, AuditRun).join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
                                        .where(AuditRun.id.in_(run_ids or [-1])).order_by(VendorReport.vendor))]

    # Each model's newest release, with its certification in its dataset's latest run.
    releases = []
    ranked = (select(Release.id, func.row_number().over(
        partition_by=Release.model_id, order_by=(Release.released_at.desc().nulls_last(), Release.id.desc())).label("rn"))
        .join(Model, Release.model_id == Model.id).where(Model.workspace_id == workspace_id).subquery())
    for rel, mod in db.execute(select(Release, Model).join(Model, Release.model_id == Model.id)
                               .join(ranked, ranked.c.id == Release.id).where(ranked.c.rn == 1).order_by(Model.name)):
        cert = db.execute(select(Certification, AuditRun).join(AuditRun, Certification.audit_run_id == AuditRun.id)
                          .where(Certification.release_id == rel.id, AuditRun.id.in_(run_ids or [-1]))
                          .order_by(AuditRun.id.desc()).limit(1)).first()
        releases.append({"model": mod, "release": rel, "cert": cert[0] if cert else None,
                         "dataset_id": cert[1].dataset_id if cert else None})

    alerts = list(db.scalars(select(Alert).where(Alert.workspace_id == workspace_id)
                             .order_by(Alert.created_at.desc(), Alert.id.desc()).limit(10)))
    batches = db.execute(select(Dataset.name, ImportBatch.kind, func.count(), func.sum(ImportBatch.row_count))
                         .join(Dataset, ImportBatch.dataset_id == Dataset.id)
                         .where(Dataset.workspace_id == workspace_id, ImportBatch.created_at >= since)
                         .group_by(Dataset.name, ImportBatch.kind).order_by(Dataset.name)).all()
    runs_today = db.execute(select(AuditRun.status, func.count()).join(Dataset, AuditRun.dataset_id == Dataset.id)
                            .where(Dataset.workspace_id == workspace_id, AuditRun.created_at >= since)
                            .group_by(AuditRun.status)).all()
    new_releases = db.execute(select(Model.name, Release.version, Release.id, Model.id)
                              .join(Model, Release.model_id == Model.id)
                              .where(Model.workspace_id == workspace_id, Release.created_at >= since)
                              .order_by(Release.created_at.desc()).limit(20)).all()
    n_alerts_today = db.scalar(select(func.count()).select_from(Alert)
                               .where(Alert.workspace_id == workspace_id, Alert.created_at >= since))
    changes = {"batches": [{"dataset": n, "kind": str(k), "n": c, "rows": int(r or 0)} for n, k, c, r in batches],
               "runs": {str(s): c for s, c in runs_today}, "releases": new_releases, "n_alerts": n_alerts_today}
    return {"datasets": ds_rows, "vendors": vendors, "releases": releases, "alerts": alerts, "changes": changes}


def dataset_page(db: Session, ds: Dataset) -> dict:
    run = latest_runs(db, [ds.id]).get(ds.id)
    # The newest failed audit, when no audit has succeeded since: the page says why it failed.
    failed = db.scalars(select(AuditRun).where(AuditRun.dataset_id == ds.id, AuditRun.status == AuditStatus.FAILED,
                                               AuditRun.id > (run.id if run is not None else 0))
                        .order_by(AuditRun.id.desc()).limit(1)).first()
    out: dict = {"dataset": ds, "run": run, **_upper(run), "agreements": [], "best": [], "curve": None, "charts": [],
                 "releases": [], "vendors": [], "failed_run": failed,
                 "n_items": db.scalar(select(func.count()).select_from(Item).where(Item.dataset_id == ds.id))}
    if run is None:
        return out
    out["agreements"] = list(db.scalars(select(Agreement).where(Agreement.audit_run_id == run.id,
                                                                Agreement.vendor.is_(None))
                                        .order_by(Agreement.coefficient)))
    out["best"] = list(db.scalars(select(BestScore).where(BestScore.audit_run_id == run.id).order_by(BestScore.metric)))
    curves = list(db.scalars(select(PowerCurve).where(PowerCurve.audit_run_id == run.id).order_by(PowerCurve.id)))
    base = next((c for c in curves if c.release_id is None and c.vendor is None), None)
    rel_curves = [c for c in curves if c.release_id is not None]
    rel_names = {r.id: (m.name, r.version) for r, m in db.execute(
        select(Release, Model).join(Model, Release.model_id == Model.id)
        .where(Release.id.in_([c.release_id for c in rel_curves] or [-1])))}
    out["releases"] = [{"model": rel_names.get(c.release_id, ("?", "?"))[0],
                        "version": rel_names.get(c.release_id, ("?", "?"))[1], "curve": c} for c in rel_curves]
    charts = []
    # One chart per (combiner, scorer): the humans' curve with its band, and each release's
    # classifier score placed at its survey equivalence.
    pairs = list(dict.fromkeys((c.combiner, c.scorer) for c in ([base] if base else []) + rel_curves))
    for combiner, scorer in pairs:
        human = base if base is not None and (base.combiner, base.scorer) == (combiner, scorer) else next(
            c for c in rel_curves if (c.combiner, c.scorer) == (combiner, scorer))
        pts = [p for p in human.points or [] if "k" in p]
        chart = {"title": f"{scorer.replace('_', ' ')} of {combiner} over k raters",
                 "x_label": "number of human raters k", "y_label": f"{scorer} ({combiner})",
                 "series": [{"name": "humans: power curve c_k", "points": [[p["k"], p.get("mean")] for p in pts],
                             "band": [[p["k"], p.get("ci_low"), p.get("ci_high")] for p in pts]}],
                 "markers": []}
        for r in out["releases"]:
            c = r["curve"]
            if (c.combiner, c.scorer) == (combiner, scorer) and c.classifier_score is not None:
                chart["markers"].append({"x": c.equivalence, "y": c.classifier_score,
                                         "label": f"{r['model']} {r['version']}", "note": c.equivalence_note})
        charts.append(chart)
    out["curve"] = base
    out["charts"] = charts
    out["vendors"] = list(db.scalars(select(VendorReport).where(VendorReport.audit_run_id == run.id)
                                     .order_by(VendorReport.vendor)))
    return out


def model_page(db: Session, model: Model, dataset_id: int | None, workspace_id: int) -> dict:
    datasets = db.execute(select(Dataset.id, Dataset.name).join(AuditRun, AuditRun.dataset_id == Dataset.id)
                          .join(Certification, Certification.audit_run_id == AuditRun.id)
                          .join(Release, Certification.release_id == Release.id)
                          .where(Release.model_id == model.id, Dataset.workspace_id == workspace_id)
                          .distinct().order_by(Dataset.name)).all()
    releases = list(db.scalars(select(Release).where(Release.model_id == model.id)
                               .order_by(Release.released_at.asc().nulls_last(), Release.id)))
    out: dict = {"model": model, "datasets": datasets, "dataset_id": None, "rows": [], "chart": None,
                 "releases": releases}
    if not datasets:
        return out
    ds_id = dataset_id if dataset_id in {d.id for d in datasets} else datasets[0].id
    out["dataset_id"] = ds_id
    # Each release's certification in the newest run that certified it on this dataset.
    ranked = (select(Certification.id, func.row_number().over(
        partition_by=Certification.release_id, order_by=Certification.audit_run_id.desc()).label("rn"))
        .join(AuditRun, Certification.audit_run_id == AuditRun.id)
        .join(Release, Certification.release_id == Release.id)
        .where(AuditRun.dataset_id == ds_id, Release.model_id == model.id).subquery())
    certs = {c.release_id: c for c in db.scalars(select(Certification).join(ranked, ranked.c.id == Certification.id)
                                                 .where(ranked.c.rn == 1))}
    curves: dict[tuple[int, int], list[PowerCurve]] = defaultdict(list)
    for c in db.scalars(select(PowerCurve).where(PowerCurve.audit_run_id.in_({c.audit_run_id for c in certs.values()} or {-1}),
                                                 PowerCurve.release_id.in_(list(certs) or [-1]))
                        .order_by(PowerCurve.id)):
        curves[(c.release_id, c.audit_run_id)].append(c)
    rows = []
    for i, r in enumerate(releases):
        c = certs.get(r.id)
        if c is None:
            continue
        rows.append({"i": i, "release": r, "cert": c, "curves": curves.get((r.id, c.audit_run_id), [])})
    out["rows"] = rows
    if rows:
        ticks = [r["release"].version for r in rows]
        xs = range(len(rows))
        out["chart"] = {
            "x_label": "release", "y_label": "accuracy against the oracle (bounds)", "x_ticks": ticks,
            "series": [
                {"name": "L (model lower bound)", "points": [[x, r["cert"].l] for x, r in zip(xs, rows, strict=True)]},
                {"name": "U_t (human upper bound, rigorous)",
                 "points": [[x, r["cert"].u_t] for x, r in zip(xs, rows, strict=True)], "style": "dashed"},
                {"name": "U_e (human upper bound, empirical)",
                 "points": [[x, r["cert"].u_e] for x, r in zip(xs, rows, strict=True)], "style": "dotted"},
            ],
            "badges": [{"x": x, "y": r["cert"].l, "certified": bool(r["cert"].certified)}
                       for x, r in zip(xs, rows, strict=True)],
        }
    return out


def vendor_page(db: Session, workspace_id: int, vendor: str, *, dataset_ids=None) -> dict:
    """``dataset_ids``: only these datasets (a vendor user sees the datasets it is granted)."""
    # The per-annotator lists are read for the latest report only (below), not for every run.
    stmt = (select(VendorReport, AuditRun, Dataset).options(defer(VendorReport.annotators), defer(VendorReport.details))
            .join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
            .join(Dataset, AuditRun.dataset_id == Dataset.id)
            .where(Dataset.workspace_id == workspace_id, VendorReport.vendor == vendor,
                   AuditRun.status == AuditStatus.SUCCEEDED)
            .order_by(Dataset.name, AuditRun.data_version, AuditRun.id))
    if dataset_ids is not None:
        stmt = stmt.where(Dataset.id.in_(list(dataset_ids) or [-1]))
    rows = db.execute(stmt).all()
    by_dataset: dict[int, dict] = {}
    for rep, run, ds in rows:
        entry = by_dataset.setdefault(ds.id, {"dataset": ds, "reports": []})
        entry["reports"].append((rep, run))
    charts = []
    for entry in by_dataset.values():
        reps = entry["reports"]
        entry["latest"] = reps[-1][0]
        entry["chart"] = {
            "x_label": "data version", "y_label": "upper bound on raters' accuracy",
            "series": [{"name": "U_t", "points": [[run.data_version, rep.u_t] for rep, run in reps]},
                       {"name": "U_e", "points": [[run.data_version, rep.u_e] for rep, run in reps],
                        "style": "dashed"}]}
        if any(rep.expert_equivalence is not None for rep, _ in reps):
            entry["eq_chart"] = {
                "x_label": "data version", "y_label": "expert equivalence of k vendor raters",
                "series": [{"name": "expert equivalence",
                            "points": [[run.data_version, rep.expert_equivalence] for rep, run in reps]}]}
        charts.append(entry)
    alert_stmt = select(Alert).where(Alert.workspace_id == workspace_id, Alert.subject == vendor)
    if dataset_ids is not None:
        alert_stmt = alert_stmt.where(Alert.dataset_id.in_(list(dataset_ids) or [-1]))
    alerts = list(db.scalars(alert_stmt.order_by(Alert.created_at.desc()).limit(50)))
    return {"vendor": vendor, "datasets": charts, "alerts": alerts}


def audit_runs(db: Session, workspace_id: int, *, limit: int = 200) -> list:
    return db.execute(select(AuditRun, Dataset.name).join(Dataset, AuditRun.dataset_id == Dataset.id)
                      .where(Dataset.workspace_id == workspace_id).order_by(AuditRun.id.desc()).limit(limit)).all()


def vendor_datasets(db: Session, workspace_id: int) -> dict[str, list[str]]:
    """Which datasets each vendor has reports on (for the overview's links)."""
    out: dict[str, list[str]] = defaultdict(list)
    for v, name in db.execute(select(VendorReport.vendor, Dataset.name).join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
                              .join(Dataset, AuditRun.dataset_id == Dataset.id)
                              .where(Dataset.workspace_id == workspace_id).distinct()):
        out[v].append(name)
    return out
