"""Read models of the dashboards: one function per page, plain dicts for the templates and charts."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from sqlalchemy import Select, func, select, tuple_
from sqlalchemy.orm import Session, aliased, defer

from auditor.db import (
    Agreement,
    Alert,
    Annotation,
    Annotator,
    AuditRun,
    AuditStatus,
    BestScore,
    Certification,
    Dataset,
    ImportBatch,
    Item,
    Model,
    PowerCurve,
    QualityChange,
    QualityWindow,
    Release,
    VendorReport,
)
from auditor.db.queries_audit import latest_runs

__all__ = ["annotator_page", "audit_runs", "dataset_page", "model_page", "overview", "vendor_page"]


def _upper(run: AuditRun | None) -> dict:
    upper = ((run.summary or {}).get("upper") or {}) if run else {}
    return {"u_t": upper.get("u_t"), "u_e": upper.get("u_e")}


# --- quality over time: weekly windows and the detector's changes -----------------------------

QUALITY_METRICS = ("agreement", "gold_accuracy")
_SERIES_NAMES = {"agreement": "agreement with the others' consensus", "gold_accuracy": "accuracy on gold items"}
# Keys per ``IN (...)``: bounded parameters per statement.
_KEYS_PER_QUERY = 1000


def _epoch_ms(when: datetime) -> int:
    """Milliseconds since 1970 for the charts (SQLite returns naive datetimes: they are UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _group_key(db: Session, column):
    """``column`` as compared with ``group_name`` of the quality tables. Annotator ids have
    the C collation on PostgreSQL, ``group_name`` the database's: compared in that one, the
    lookups below stay on the tables' (dataset, grouping, group, metric, week) index."""
    return column.collate("default") if db.get_bind().dialect.name == "postgresql" else column


def _recent(db: Session, keys: Select, grouping: str, *, depth: int = 1
            ) -> tuple[dict[tuple, list[QualityWindow]], dict[tuple, QualityChange]]:
    """The newest ``depth`` weekly windows of each metric, and the newest change, of each
    (dataset, group) that ``keys`` lists (its columns ``dataset_id`` and ``group_name``).

    Windows are keyed (dataset id, group, metric), newest first; changes (dataset id, group).
    Bounded whatever the length of the history: per key, one index lookup per metric and
    window and one for the newest change, in three statements."""
    k = keys.subquery()
    w, c = aliased(QualityWindow), aliased(QualityChange)
    cols = [k.c.dataset_id, k.c.group_name]
    for metric in QUALITY_METRICS:
        cols += [select(w.window_key).where(w.dataset_id == k.c.dataset_id, w.grouping == grouping,
                                        w.group_name == k.c.group_name, w.metric == metric)
                 .order_by(w.window_key.desc()).limit(1).offset(i).scalar_subquery() for i in range(depth)]
    cols.append(select(c.id).where(c.dataset_id == k.c.dataset_id, c.grouping == grouping,
                                   c.group_name == k.c.group_name)
                .order_by(c.detected_at.desc(), c.id.desc()).limit(1).scalar_subquery())
    wanted: list[tuple] = []
    change_ids: list[int] = []
    for dataset_id, name, *found in db.execute(select(*cols)):
        for i, metric in enumerate(QUALITY_METRICS):
            wanted += [(dataset_id, name, metric, start) for start in found[i * depth:(i + 1) * depth]
                       if start is not None]
        if found[-1] is not None:
            change_ids.append(found[-1])
    # The same statements whether or not there is anything to read (one each up to _KEYS_PER_QUERY keys).
    q = QualityWindow
    windows: dict[tuple, list[QualityWindow]] = defaultdict(list)
    for at in range(0, max(len(wanted), 1), _KEYS_PER_QUERY):
        for row in db.scalars(select(q).where(q.grouping == grouping, tuple_(
                q.dataset_id, q.group_name, q.metric, q.window_key).in_(wanted[at:at + _KEYS_PER_QUERY]))):
            windows[(row.dataset_id, row.group_name, row.metric)].append(row)
    for rows in windows.values():
        rows.sort(key=lambda r: r.window_key, reverse=True)
    changes: dict[tuple, QualityChange] = {}
    for at in range(0, max(len(change_ids), 1), _KEYS_PER_QUERY):
        for ch in db.scalars(select(QualityChange).where(QualityChange.id.in_(change_ids[at:at + _KEYS_PER_QUERY]))):
            changes[(ch.dataset_id, ch.group_name)] = ch
    return windows, changes


def _quality_chart(windows: list[QualityWindow], changes: list[QualityChange]) -> dict | None:
    """Weekly agreement (and gold accuracy where there is gold) over time with 95% bands;
    each change found marked where it started."""
    series = []
    for metric in QUALITY_METRICS:
        rows = sorted((r for r in windows if r.metric == metric), key=lambda r: r.window_key)
        if rows:
            series.append({"name": _SERIES_NAMES[metric], "metric": metric,
                           "points": [[_epoch_ms(r.window_start), r.value] for r in rows],
                           "band": [[_epoch_ms(r.window_start), r.low, r.high] for r in rows]})
    if not series:
        return None
    vlines = [{"x": _epoch_ms(ch.start), "kind": ch.direction,
               "label": f"{ch.direction} from {ch.start:%Y-%m-%d}"
                        + (" (gold accuracy)" if ch.metric == "gold_accuracy" else ""),
               "note": f"{ch.before:.3f} → {ch.after:.3f}"} for ch in changes]
    return {"x_type": "time", "x_unit_days": 7, "x_label": "week (from Monday, UTC)",
            "y_label": "agreement / gold accuracy", "series": series, "vlines": vlines}


def _weeks(windows: list[QualityWindow]) -> list[dict]:
    """One row per week, newest first: each metric's window, and the labels counted."""
    weeks: dict[int, dict] = {}
    for r in windows:
        week = weeks.setdefault(r.window_key, {"start": r.window_start, "window": r.window_key, "n_labels": r.n_labels,
                                           **dict.fromkeys(QUALITY_METRICS)})
        week[r.metric] = r
    return sorted(weeks.values(), key=lambda w: w["window"], reverse=True)


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
    names = {d.id: d.name for d in datasets}
    # Each vendor's newest two weekly windows and newest change (bounded: see _recent).
    keys = (select(AuditRun.dataset_id.label("dataset_id"), VendorReport.vendor.label("group_name"))
            .join(AuditRun, VendorReport.audit_run_id == AuditRun.id).where(AuditRun.id.in_(run_ids or [-1])))
    windows, found = _recent(db, keys, "vendor", depth=2)
    vendors = []
    for v, run in db.execute(select(VendorReport, AuditRun).options(defer(VendorReport.annotators),
                                                                     defer(VendorReport.details))
                             .join(AuditRun, VendorReport.audit_run_id == AuditRun.id)
                             .where(AuditRun.id.in_(run_ids or [-1])).order_by(VendorReport.vendor)):
        weekly = windows.get((run.dataset_id, v.vendor, "agreement"), [])
        latest_week, before = [*weekly, None, None][:2]
        delta = (latest_week.value - before.value if latest_week is not None and before is not None
                 and latest_week.value is not None and before.value is not None else None)
        vendors.append({"vendor": v.vendor, "dataset": names[run.dataset_id], "dataset_id": run.dataset_id,
                        "u_t": v.u_t, "u_e": v.u_e, "agreement": v.agreement,
                        "expert_equivalence": v.expert_equivalence, "n_annotators": v.n_annotators,
                        "week": latest_week, "previous_week": before, "delta": delta,
                        "change": found.get((run.dataset_id, v.vendor))})

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

    # The vendor's weekly quality: its whole series on each dataset (the charts) and its changes.
    q = QualityWindow
    wstmt = (select(q).join(Dataset, q.dataset_id == Dataset.id)
             .where(Dataset.workspace_id == workspace_id, q.grouping == "vendor", q.group_name == vendor)
             .order_by(q.dataset_id, q.window_key, q.metric))
    if dataset_ids is not None:
        wstmt = wstmt.where(Dataset.id.in_(list(dataset_ids) or [-1]))
    series: dict[int, list[QualityWindow]] = defaultdict(list)
    for r in db.scalars(wstmt):
        series[r.dataset_id].append(r)
    for ds in db.scalars(select(Dataset).where(Dataset.id.in_(list(set(series) - set(by_dataset)) or [-1]))):
        by_dataset[ds.id] = {"dataset": ds, "reports": []}
    ids = list(by_dataset)
    changes: dict[int, list[QualityChange]] = defaultdict(list)
    for ch in db.scalars(select(QualityChange).where(QualityChange.dataset_id.in_(ids or [-1]),
                                                     QualityChange.grouping == "vendor",
                                                     QualityChange.group_name == vendor)
                         .order_by(QualityChange.detected_at.desc(), QualityChange.id.desc())):
        changes[ch.dataset_id].append(ch)

    # Its annotators' newest window of each metric and newest change, on each dataset.
    keys = (select(Dataset.id.label("dataset_id"), _group_key(db, Annotator.external_id).label("group_name"))
            .join(Annotator, Annotator.workspace_id == Dataset.workspace_id)
            .where(Dataset.id.in_(ids or [-1]), Annotator.vendor == vendor))
    latest_windows, latest_changes = _recent(db, keys, "annotator")
    # Only the latest report's per-annotator bounds are read (not every run's).
    latest_ids = [entry["reports"][-1][0].id for entry in by_dataset.values() if entry["reports"]]
    bounds = dict(db.execute(select(VendorReport.id, VendorReport.annotators)
                             .where(VendorReport.id.in_(latest_ids or [-1]))).all())

    charts = []
    for entry in sorted(by_dataset.values(), key=lambda e: e["dataset"].name):
        ds_id = entry["dataset"].id
        reps = entry["reports"]
        entry["latest"] = reps[-1][0] if reps else None
        entry["quality_chart"] = _quality_chart(series.get(ds_id, []), changes.get(ds_id, []))
        entry["changes"] = changes.get(ds_id, [])
        audit = {a.get("annotator"): a for a in (bounds.get(reps[-1][0].id) or [] if reps else [])}
        people = sorted({name for (d, name, _m) in latest_windows if d == ds_id} | set(audit))
        entry["annotators"] = [
            {"annotator": name, "agreement": (latest_windows.get((ds_id, name, "agreement")) or [None])[0],
             "gold": (latest_windows.get((ds_id, name, "gold_accuracy")) or [None])[0],
             "change": latest_changes.get((ds_id, name)), "audit": audit.get(name)} for name in people]
        entry["chart"] = None
        if reps:
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


def annotator_page(db: Session, ds: Dataset, person: Annotator) -> dict:
    """One annotator on one dataset: its weekly series, the changes found, the items it labelled."""
    q, c = QualityWindow, QualityChange
    windows = list(db.scalars(select(q).where(q.dataset_id == ds.id, q.grouping == "annotator",
                                              q.group_name == person.external_id)
                              .order_by(q.window_key, q.metric)))
    changes = list(db.scalars(select(c).where(c.dataset_id == ds.id, c.grouping == "annotator",
                                              c.group_name == person.external_id)
                              .order_by(c.detected_at.desc(), c.id.desc())))
    n_items = db.scalar(select(func.count()).select_from(Annotation)
                        .where(Annotation.dataset_id == ds.id, Annotation.annotator_id == person.id))
    weeks = _weeks(windows)
    return {"dataset": ds, "annotator": person, "n_items": n_items, "weeks": weeks, "changes": changes,
            "n_labels": sum(w["n_labels"] for w in weeks), "chart": _quality_chart(windows, changes),
            "disagreements": disagreements(db, ds, person), "recent_labels": RECENT_LABELS}


#: The annotator's most recent labels looked at for disagreements, and how many are listed.
RECENT_LABELS = 500
LISTED_DISAGREEMENTS = 25


def disagreements(db: Session, ds: Dataset, person: Annotator) -> list[dict]:
    """Of the annotator's most recent labels, those that differ from every plurality label
    of the *other* annotators on the item (ties counted as agreement), newest first."""
    rows = db.execute(
        select(Annotation.label, func.coalesce(Annotation.annotated_at, Annotation.created_at), Item.external_id,
               Item.label_counts, Item.gold_label)
        .join(Item, Item.id == Annotation.item_id)
        .where(Annotation.dataset_id == ds.id, Annotation.annotator_id == person.id)
        .order_by(Annotation.data_version.desc(), Annotation.item_id).limit(RECENT_LABELS)).all()
    labels = list(ds.labels)
    out = []
    for label, when, item, counts, gold in rows:
        others = list(counts or [0] * len(labels))[: len(labels)]
        if label < len(others):
            others[label] -= 1
        top = max(others, default=0)
        if top <= 0 or others[label] == top:
            continue  # no other label on the item, or its label is (one of) the others' plurality
        out.append({"item": item, "label": labels[label] if label < len(labels) else label, "at": when,
                    "others": {labels[i]: n for i, n in enumerate(others) if n},
                    "consensus": [labels[i] for i, n in enumerate(others) if n == top],
                    "gold": labels[gold] if gold is not None and gold < len(labels) else None})
        if len(out) == LISTED_DISAGREEMENTS:
            break
    return out


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
